"""The registry's schema: variants, releases, models and profiles, as strict pydantic v2 models.

Every model forbids unknown fields, so a misspelt key in a TOML file is an error located at its line,
not a silently ignored setting. Values that travel as environment variables are canonical strings
(``"1"``, ``"r9k"``, ``"0.98"``); :meth:`Variant.normalize` turns user input (TOML ints and bools
included) into that form or raises :class:`ValueError` with the reason.
"""
from __future__ import annotations

import datetime
import math
import re
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .provenance import parse_spec

#: A variable name that POSIX shells and ``execve`` both accept (``[env]`` keys of a profile).
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

ValueType = Literal["bool", "enum", "int", "float", "string", "path"]
Category = Literal["fusion", "kernel", "comm", "tuning", "diagnostic", "launcher"]
# What a switch changes (registry/effects.py KINDS): weights, shapes, ops put it in the compile-cache key.
ChangeKind = Literal["weights", "shapes", "ops", "tuning", "collective", "host", "diagnostic"]
Status = Literal["default-on", "opt-in", "rejected", "removed"]
GateKind = Literal["bit-exact", "tolerance", "paired-eval"]

TP_KEY = re.compile(r"^tp[0-9]+$")
ID_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
KNOB_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")

_TRUE = {"1", "true", "on", "yes"}
_FALSE = {"0", "false", "off", "no"}


class Strict(BaseModel):
    # defer_build: validators are built on first use, not at import (halves the import on the plugin's path)
    model_config = ConfigDict(extra="forbid", frozen=False, populate_by_name=True, defer_build=True)

    def plain(self) -> dict:
        """``model_dump()`` of a model without nested models, without building pydantic's serializer (costly)."""
        return {k: _plain(getattr(self, k)) for k in type(self).model_fields}


def _plain(v):
    if isinstance(v, BaseModel):
        raise TypeError("plain(): a nested model; use model_dump()")
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return [_plain(x) for x in v] if isinstance(v, list) else v


# ----------------------------------------------------------------------------------------- variants


class NumRange(Strict):
    min: Optional[float] = None
    max: Optional[float] = None


class Implementation(Strict):
    """This project's implementation of a variant, and how the plugin installs it.

    module:   this project's module (``r9k.kernels.router``); None: external code, the knob is only exported.
    op:       the kernel op name in ``r9k.kernels.ops`` that the knob switches.
    platforms: where this project's implementation has run: ``cuda-h200``, ``triton-interpret``, ...
    extension_point: how the plugin installs it (``pluggable_layer:NAME``, ``custom_op:NAME``, ... or ``env-only``).
    sources:  repository paths whose content hash decides whether a recorded gate result is fresh."""

    module: Optional[str] = None
    op: Optional[str] = None
    platforms: list[str] = Field(default_factory=list)
    extension_point: Optional[str] = None
    sources: list[str] = Field(default_factory=list)

    @field_validator("extension_point")
    @classmethod
    def _ext(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        kinds = ("pluggable_layer:", "custom_op:", "ir_op:", "model_registry:", "quantization:", "model_class:",
                 "device_communicator:")
        if v == "env-only" or (v.startswith(kinds) and len(v.split(":", 1)[1]) > 0):
            return v
        raise ValueError(
            f"extension_point {v!r} must be 'env-only' or one of pluggable_layer:NAME, custom_op:NAME, "
            "ir_op:NAME, model_registry:NAME, quantization:NAME, model_class:NAME, device_communicator:NAME"
        )


class Original(Strict):
    """The original stack's implementation, for orientation (its files are not in this repository)."""

    repo: str = "bkvargyas/r9700-stack"
    files: list[str] = Field(default_factory=list)
    platforms: list[str] = Field(default_factory=list)


class MemoryCost(Strict):
    """What a variant costs (positive) or frees (negative) of each GPU's memory, per TP key."""

    bytes_per_gpu: dict[str, int] = Field(default_factory=dict)
    # bytes a GPU as an expression of the model's dims, ``tp``, the knob's ``value`` and other knobs
    # (``knob('NBT')``, ``on('R9K_X')``: registry/memory.py); where given it replaces bytes_per_gpu.
    formula: Optional[str] = None
    basis: Optional[str] = None  # how the bytes were derived (formula from the model's dims, or measured)
    note: Optional[str] = None  # the original stack's statement, caveats kept

    @field_validator("bytes_per_gpu")
    @classmethod
    def _keys(cls, v: dict[str, int]) -> dict[str, int]:
        for k in v:
            if not (TP_KEY.match(k) or k == "all"):
                raise ValueError(f"memory key {k!r} must be 'all' or a TP key like 'tp4'")
        return v

    @field_validator("formula")
    @classmethod
    def _formula(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            from .formula import Formula

            Formula(v, where="formula")  # FormulaError (a ValueError): a located schema error
        return v

    def for_tp(self, tp: int) -> int:
        return self.bytes_per_gpu.get(f"tp{tp}", self.bytes_per_gpu.get("all", 0))


class KnownBad(Strict):
    """A toolchain range this variant is known to be wrong on (``validate`` warns when the installed
    toolchain, or one its gate passed on, falls in it)."""

    package: Literal["torch", "triton", "vllm", "python", "device"]
    versions: str = Field(min_length=1)  # comma-separated clauses: >=, >, <=, <, ==, != (device: == / !=)
    reason: str = Field(min_length=1)

    @field_validator("versions")
    @classmethod
    def _spec(cls, v: str) -> str:
        parse_spec(v)  # raises ValueError with the bad clause
        return v


class Gate(Strict):
    """How a variant is gated: ``tests`` are pytest node ids in this repository (run by ``r9kctl gate``);
    ``original_tests`` name the original stack's tests, for the record."""

    kind: list[GateKind] = Field(default_factory=list)
    tests: list[str] = Field(default_factory=list)
    original_tests: list[str] = Field(default_factory=list)
    thresholds: dict[str, Union[float, str]] = Field(default_factory=dict)
    eval: Optional[str] = None
    known_bad: list[KnownBad] = Field(default_factory=list)


class StatusInfo(Strict):
    state: Status
    reason: str = Field(min_length=1)


class Change(Strict):
    """A default that changed: at ``tp``, ``from`` -> ``to``; a variant's history adds the ``release``
    (:class:`DefaultChange`), a release the ``knob`` (:class:`ReleaseChange`)."""
    tp: str  # "all", a model's scope name (models.toml), or "tpN" (the primary model at TP N)
    from_: str = Field(alias="from")
    to: str
    note: Optional[str] = None


class DefaultChange(Change):
    release: str


class Measurement(Strict):
    release: str
    metric: str
    platform: str = "r9700"
    before: Optional[str] = None
    after: Optional[str] = None
    unit: Optional[str] = None
    method: Optional[str] = None  # how it was measured: the command, or the original's note
    note: Optional[str] = None


class Target(Strict):
    """A launcher knob sets something of vLLM's rather than an R9K_ variable of the plugin.

    ``vllm-arg``: ``NAME VALUE``; ``vllm-flag`` (bool): ``NAME`` at 1, ``--no-NAME`` at 0; ``json-field``: the key
    ``field`` of the JSON flag NAME, with the constant keys ``fields``; ``env``: the variable NAME (or per value
    ``env``), read by ``program``; ``none``: nothing launched here reads it (``reason``). Checked against the
    target vLLM's interface description (registry/vllm_map.py)."""

    kind: Literal["vllm-arg", "vllm-flag", "json-field", "env", "none", "compilation-config", "speculative-config",
                  "attention-backend", "other", "kernel-config", "custom-op", "vllm-env"]
    # vLLM's own switches: ``kernel-config``: the field NAME of ``--kernel-config``; ``custom-op``: the custom op
    # NAME, "+" (vLLM's kernel) or "-" (native torch) in ``custom_ops``; ``vllm-env``: the vLLM variable NAME
    name: str  # the flag (``--max-num-seqs``), the JSON flag of a json-field, the variable, or what reads it (none)
    text: Optional[str] = None
    field: Optional[str] = None  # json-field: the key of the JSON flag's object (``cudagraph_mode``)
    fields: dict[str, Union[str, int, float, bool]] = Field(default_factory=dict)  # json-field: constant keys sent with it
    encode: Literal["str", "int", "float", "int-list", "bool"] = "str"  # how the value is written (int-list: "1,2" -> [1, 2])
    unit: Optional[str] = None  # the knob's unit ("GiB") when the target's differs
    target_unit: Optional[str] = None  # the unit vLLM's flag takes ("bytes"); must match the description's
    program: str = "vllm"  # env: the program that reads the variable (vllm, rccl, hip, ...)
    env: dict[str, dict[str, str]] = Field(default_factory=dict)  # env: value -> variables set (instead of NAME=value)
    path: bool = False  # the value names a file that must exist at launch (pre-flight)
    reason: Optional[str] = None  # none: why the knob reaches no program launched here


class VllmSwitch(Strict):
    """One of vLLM's own switches (a variant's ``sets`` of vLLM's): where it exists and what vLLM does with it unset.

    versions:  the vLLM versions that have it (registry/provenance.parse_spec clauses).
    platforms: the platform families it acts on; empty: every platform.
    default:   vLLM's own choice when unset, per platform family (``all`` for every platform).
    decides:   the layer kind it chooses for; source: where vLLM reads it.
    fast:      the fast path per platform family: left to vLLM, a layer that runs another is a slow fallback."""

    versions: str = ""
    platforms: list[str] = Field(default_factory=list)
    default: dict[str, str] = Field(default_factory=dict)
    decides: str = Field(min_length=1)
    source: str = Field(min_length=1)
    fast: dict[str, str] = Field(default_factory=dict)

    @field_validator("versions")
    @classmethod
    def _spec(cls, v: str) -> str:
        if v:
            parse_spec(v)
        return v

    @field_validator("platforms")
    @classmethod
    def _plats(cls, v: list[str]) -> list[str]:
        for p in v:
            if p not in ("cpu", "cuda", "rocm", "xpu", "tpu"):
                raise ValueError(f"platform {p!r} must be a family: cpu, cuda, rocm, xpu or tpu")
        return v


class Variant(Strict):
    id: str
    knob: str
    also_knobs: list[str] = Field(default_factory=list)
    type: ValueType
    choices: list[str] = Field(default_factory=list)  # enum: the allowed values
    range: Optional[NumRange] = None  # int/float: the allowed range
    special: list[str] = Field(default_factory=list)  # extra literal values of an int/float knob ("auto")
    allow_unset: bool = False  # "" (unset) is a legal value
    stock: Optional[str] = None  # the value that restores vLLM's own path (None: no stock path)
    code_default: Optional[str] = None  # what the original plugin did with the variable unset
    defaults: dict[str, str] = Field(default_factory=dict)  # "tp4" -> value: the shipped defaults (latest release)
    model_defaults: dict[str, dict[str, str]] = Field(default_factory=dict)  # model -> tp key -> value
    # platform family (cpu, cuda, rocm) -> tp key or "all" -> value: the shipped default on that platform
    platform_defaults: dict[str, dict[str, str]] = Field(default_factory=dict)
    category: Category
    area: str
    summary: str = Field(min_length=1)
    implementation: Implementation = Field(default_factory=Implementation)
    original: Optional[Original] = None
    memory: Optional[MemoryCost] = None
    gate: Optional[Gate] = None
    status: StatusInfo
    since: Optional[str] = Field(default=None, pattern=r"^v\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?$")  # a release version
    history: list[DefaultChange] = Field(default_factory=list)
    measured: list[Measurement] = Field(default_factory=list)
    requires: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    supported_tp: list[int] = Field(default_factory=list)  # empty: every TP size
    models: list[str] = Field(default_factory=list)  # empty: every model
    excluded_models: list[str] = Field(default_factory=list)  # models that lack the part this variant touches
    # what switching it changes; empty: derived from the other facts (registry/effects.py)
    changes: list[ChangeKind] = Field(default_factory=list)
    sets: Optional[Target] = None
    vllm: Optional[VllmSwitch] = None  # one of vLLM's own switches: versions, platforms, vLLM's default
    note: Optional[str] = None

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not ID_RE.match(v):
            raise ValueError(f"id {v!r} must be lower_snake_case")
        return v

    @field_validator("knob", "also_knobs")
    @classmethod
    def _knob(cls, v):
        for k in [v] if isinstance(v, str) else v:
            if not KNOB_RE.match(k):
                raise ValueError(f"knob {k!r} must be an UPPER_SNAKE environment variable name")
        return v

    @field_validator("defaults")
    @classmethod
    def _defaults(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not TP_KEY.match(k):
                raise ValueError(f"default key {k!r} must be a TP key like 'tp4'")
        return v

    @property
    def graph_affecting(self) -> bool:
        """Changes weights, shapes or the graph's kernels (registry/effects.py): part of vLLM's compile-cache key."""
        from .effects import graph_affecting

        return graph_affecting(self)

    @model_validator(mode="after")
    def _consistent(self) -> "Variant":
        from .effects import needs_declaring

        if not self.changes and needs_declaring(self.category, self.implementation.extension_point):
            raise ValueError("a kernel knob with no extension point declares 'changes' (what switching it changes: "
                             "weights, shapes, ops, tuning, ...): nothing else says whether it is graph-affecting")
        if self.type == "enum" and not self.choices:
            raise ValueError("an enum variant needs 'choices'")
        if self.type != "enum" and self.choices:
            raise ValueError(f"'choices' only applies to enum variants (this one is {self.type})")
        if self.range is not None and self.type not in ("int", "float"):
            raise ValueError("'range' only applies to int and float variants")
        # Every declared value must itself be legal.
        for where, val in self._declared_values():
            try:
                self.normalize(val)
            except ValueError as exc:
                raise ValueError(f"{where} {val!r} is not a legal value: {exc}") from None
        return self

    def _declared_values(self):
        if self.stock is not None:
            yield "stock", self.stock
        for k, v in self.defaults.items():
            yield f"defaults.{k}", v
        for name, table in (("model_defaults", self.model_defaults), ("platform_defaults", self.platform_defaults)):
            for m, d in table.items():
                yield from ((f"{name}.{m}.{k}", v) for k, v in d.items())

    # ---- values

    def normalize(self, value: object) -> str:
        """Canonical string form of ``value`` for this variant, or ValueError saying why not."""
        if isinstance(value, bool):
            raw = "1" if value else "0"
        elif isinstance(value, (int, float)):
            raw = repr(value) if isinstance(value, float) else str(value)
        elif isinstance(value, str):
            raw = value.strip()
        else:
            raise ValueError(f"expected a string, number or boolean, got {type(value).__name__}")
        if raw == "":
            if self.allow_unset or self.type in ("string", "path"):
                return ""
            raise ValueError("empty value; this knob cannot be unset")
        if raw in self.special:
            return raw
        t = self.type
        if t == "bool":
            low = raw.lower()
            if low in _TRUE:
                return "1"
            if low in _FALSE:
                return "0"
            raise ValueError("expected a boolean (1/0, true/false)")
        if t == "enum":
            if raw in self.choices:
                return raw
            import difflib

            near = difflib.get_close_matches(raw, self.choices, n=1, cutoff=0.6)
            raise ValueError(f"expected one of {', '.join(repr(c) for c in self.choices)}"
                             + (f" (did you mean {near[0]!r}?)" if near else ""))
        if t in ("int", "float"):
            try:
                num = int(raw) if t == "int" else float(raw)
            except ValueError:
                extra = f" or {', '.join(self.special)}" if self.special else ""
                raise ValueError(f"expected {'an integer' if t == 'int' else 'a number'}{extra}") from None
            if t == "float" and not math.isfinite(num):
                raise ValueError("expected a finite number")
            r = self.range
            if r is not None:
                if r.min is not None and num < r.min:
                    raise ValueError(f"{num:g} is below the minimum {r.min:g}")
                if r.max is not None and num > r.max:
                    raise ValueError(f"{num:g} is above the maximum {r.max:g}")
            return str(num) if t == "int" else raw
        return raw  # string, path

    def allowed_text(self) -> str:
        """The allowed values in words, for messages and the control panel."""
        if self.type == "bool":
            return "1 or 0"
        if self.type == "enum":
            vals = list(self.choices) + (["'' (unset)"] if self.allow_unset else [])
            return ", ".join(vals)
        if self.type in ("int", "float"):
            r = self.range
            lo = "-inf" if r is None or r.min is None else f"{r.min:g}"
            hi = "inf" if r is None or r.max is None else f"{r.max:g}"
            extra = f" or {', '.join(self.special)}" if self.special else ""
            return f"{self.type} in [{lo}, {hi}]{extra}"
        return self.type

    def applies_to(self, model: Optional[str]) -> bool:
        """Whether the model has the part this variant touches."""
        return not model or not ((self.models and model not in self.models) or model in self.excluded_models)

    def default_for(self, model: Optional[str], tp: int, platform: Optional[str] = None) -> Optional[str]:
        """The registry's (latest release's) default at this model, TP size (and platform), or the stock value."""
        key = f"tp{tp}"
        if not self.applies_to(model):
            return self.stock
        if model and model in self.model_defaults and key in self.model_defaults[model]:
            return self.model_defaults[model][key]
        if platform and self.platform_defaults:
            from .availability import platform_family

            fam = platform_family(platform)
            pd = self.platform_defaults.get(fam or "", {})
            if key in pd or "all" in pd:
                return pd.get(key, pd.get("all"))
        if key in self.defaults:
            return self.defaults[key]
        return self.stock


# ----------------------------------------------------------------------------------------- releases


class BenchRecord(Strict):
    """One measured number of a release: ``value`` or ``low``/``high``, or ``text`` alone."""

    config: str  # <model scope>_tp<N> (models.toml), or a platform config such as h200_tp4_shard
    metric: str
    value: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    approx: bool = False
    unit: Optional[str] = None
    stack: Literal["ours", "reference"] = "ours"
    platform: str = "r9700"
    # how it was measured: probe (probe.py), betterbench, release-table (the notes' table), step-script
    # (~/tp4tune.sh), startup (vLLM's log), client, launcher-header, r9kctl-bench, notes (their prose), kernel
    method: Optional[Literal["probe", "betterbench", "release-table", "step-script", "startup", "client",
                             "launcher-header", "r9kctl-bench", "notes", "kernel"]] = None
    # the seed documents (the release notes) or the public repository's facts; where both give one, the seed's
    origin: Literal["seed", "reference"] = "reference"
    stated_in: Optional[str] = None  # the release whose notes state it, where not this one's ('v0.2.1'), or
    # 'launcher' / 'progress' (stated outside any release notes: shown with --all-numbers only)
    setting: Optional[str] = None  # a configuration other than the release's defaults ('R9K_HC_FP8_DECODE=1')
    launch: Optional[Literal["warm", "cold", "restarted", "first"]] = None  # KV figures differ by launch
    unchanged: bool = False  # the notes say this figure did not change from the release before
    before: Optional[float] = None  # a before -> after the notes give within this release ('137 -> 88 ms')
    source: Optional[str] = None
    command: Optional[str] = None
    text: Optional[str] = None  # the original wording where it carries more than the number

    @model_validator(mode="after")
    def _some_value(self) -> "BenchRecord":
        if self.value is None and self.low is None and self.text is None and not self.unchanged:
            raise ValueError("a bench record needs a value, a range (low/high), a text or unchanged = true")
        if (self.low is None) != (self.high is None):
            raise ValueError("a range needs both low and high")
        if self.low is not None and self.low > self.high:
            raise ValueError(f"range reversed: low {self.low:g} > high {self.high:g}")
        if (self.value is not None or self.low is not None) and not self.unit and self.metric != "validation_notes":
            raise ValueError(f"{self.metric} = {self.point():g} has no unit")
        if self.text and self.point() is not None:
            # a figure written '121k' must not be held as 121
            for m in re.finditer(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([kM])(?![\w])", self.text.replace(",", "")):
                bare = float(m.group(1))
                if bare in (self.value, self.low, self.high):
                    raise ValueError(f"'{m.group(0)}' in the text is held as {bare:g}; write "
                                     f"{bare * (1000 if m.group(2) == 'k' else 1e6):g}")
        if self.unit == "tokens" and self.metric.startswith("kv_cache") and (self.point() or 1000) < 1000:
            raise ValueError(f"a KV cache of {self.point():g} tokens is implausible (a figure in thousands?)")
        return self

    def point(self) -> Optional[float]:
        """The number to compare: the value, else the lower end of the range."""
        return self.value if self.value is not None else self.low


class McNemar(Strict):
    b: int  # discordant: baseline right, candidate wrong
    c: int  # discordant: baseline wrong, candidate right
    p: float
    vs: Optional[str] = None


class QualityRecord(Strict):
    config: str
    eval: str = "gsm8k"  # gsm8k, gsm8k-cot-800, humaneval, sanity...
    accuracy_pct: Optional[float] = None
    correct: Optional[int] = None
    total: Optional[int] = None
    baseline_label: Optional[str] = None  # what the paired comparison ran against
    baseline_release: Optional[str] = None
    baseline_accuracy_pct: Optional[float] = None
    baseline_correct: Optional[int] = None
    mcnemar: Optional[McNemar] = None
    identical_outputs_pct: Optional[float] = None
    humaneval_passed: Optional[int] = None
    humaneval_total: Optional[int] = None
    baseline_humaneval_passed: Optional[int] = None
    sanity_bad: Optional[int] = None  # strict sanity: bad answers of sanity_total
    sanity_total: Optional[int] = None
    baseline_sanity_bad: Optional[int] = None
    baseline_sanity_total: Optional[int] = None
    # another comparison the notes give, as a range of accuracies ('the round-2 build: 97.9-98.0%')
    other_range_pct: Optional[list[float]] = None
    other_label: Optional[str] = None
    origin: Literal["seed", "reference"] = "reference"
    ci95_pct: Optional[list[float]] = None  # 95% interval of the accuracy difference (this - baseline), in points
    sanity: Optional[str] = None
    text: Optional[str] = None  # original wording
    source: Optional[str] = None
    note: Optional[str] = None


class ReleaseChange(Change):
    knob: str


class Release(Strict):
    version: str
    date: str
    headline: str
    vllm_base: Optional[str] = None
    # vLLM versions (major.minor: "0.32") this release was validated on; launch's pre-flight and the plugin check
    # the running vLLM against them
    vllm_validated: list[str] = Field(default_factory=list)
    power_cap: Optional[str] = None
    previous: Optional[str] = None  # the release before this one (the chain used to derive defaults)
    # None: a release of the original stack (registry/releases/v*.toml imported from its record); a name
    # (``r9k-stack``): a release of this project, extending ``previous`` with defaults the original never had
    project: Optional[str] = None
    default_changes: list[ReleaseChange] = Field(default_factory=list)
    initial_defaults: list[str] = Field(default_factory=list)
    bench: list[BenchRecord] = Field(default_factory=list)
    quality: list[QualityRecord] = Field(default_factory=list)
    notes: Optional[str] = None

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not re.match(r"^v\d+\.\d+\.\d+([-.][A-Za-z0-9.]+)?$", v):
            raise ValueError(f"version {v!r} must look like v1.2.3")
        return v

    @field_validator("date")
    @classmethod
    def _date(cls, v: str) -> str:  # the release order depends on it
        try:
            if not re.match(r"^\d{4}-\d{2}-\d{2}$", v):
                raise ValueError
            datetime.date.fromisoformat(v)
        except ValueError:
            raise ValueError(f"date {v!r} is not a date (YYYY-MM-DD); the release order depends on it") from None
        return v


# ----------------------------------------------------------------------------------------- models


def _byte_counts(v: dict[str, int], positive: bool) -> dict[str, int]:
    """TP key -> a number of bytes, at most 2**50: positive, else non-negative."""
    for k, n in v.items():
        if not TP_KEY.match(k):
            raise ValueError(f"key {k!r} must be a TP key like 'tp4'")
        if n < 0 or (positive and n == 0) or n > 1 << 50:
            raise ValueError(f"{k} = {n}: must be a {'positive' if positive else 'non-negative'} number of bytes "
                             "(at most 2**50)")
    return v


class HybridKV(Strict):
    """What vLLM's hybrid KV-cache allocator needs of a model of attention and recurrent-state layers
    (``registry/memory.py: HybridLayout``)."""

    attention_layers: int = Field(ge=1)
    state_layers: int = Field(ge=1)
    # one state layer's state a sequence and rank (recurrent state + conv state), before vLLM pads it to the page
    state_bytes: dict[str, int]
    # the backend's kernel block size the attention block is a multiple of (vLLM's CPU backend: 128)
    block_alignment: int = Field(default=128, ge=1)
    # state blocks a request holds per state group: 2 in vLLM's 'align' mamba cache mode (prefix caching on, its
    # default), 1 without prefix caching (``MambaSpec.max_memory_usage_bytes``)
    state_blocks_per_request: int = Field(default=2, ge=1)
    # vLLM's max_model_len when the profile's serve_args set none (the checkpoint's max_position_embeddings)
    max_model_len: int = Field(ge=1)

    @field_validator("state_bytes")
    @classmethod
    def _keys(cls, v: dict[str, int]) -> dict[str, int]:
        return _byte_counts(v, positive=True)


class KnobRange(Strict):
    """A model's own bound on a knob's value (``[model] ranges``): the values its facts make meaningful."""
    min: Optional[float] = None
    max: Optional[float] = None
    basis: str = Field(min_length=1)  # the fact it follows from


class ModelSpec(Strict):
    """What the memory budget needs of a model, per TP key: the weights a GPU holds, the memory that is
    neither weights nor KV cache, and the KV-cache bytes one token takes (``basis``: how they were derived)."""

    name: str
    description: str
    architecture: Optional[str] = None
    scope: Optional[str] = None  # the short name release scopes and bench configs (<scope>_tp<N>) use
    primary: bool = False  # what a release's bare "tpN" scope means, and a profile that names no model serves
    weight_bytes_per_gpu: dict[str, int]
    overhead_bytes_per_gpu: dict[str, int] = Field(default_factory=dict)
    kv_bytes_per_token: dict[str, int]
    # a hybrid model's page arithmetic in vLLM (then kv_bytes_per_token is its attention layers' bytes a token)
    kv_hybrid: Optional[HybridKV] = None
    # the dimensions the variants' memory formulas read (hidden sizes, layer and module counts, bytes a token
    # of graph memory...), with the derived quantities as expressions of them
    dims: dict[str, Union[int, float]] = Field(default_factory=dict)
    derived: dict[str, str] = Field(default_factory=dict)
    basis: str
    checks: list[str] = Field(default_factory=list)  # what the numbers were checked against
    # knob -> the range the model's facts allow (MTP depths from its MTP head): validate refuses a value outside
    ranges: dict[str, KnobRange] = Field(default_factory=dict)

    @field_validator("weight_bytes_per_gpu", "overhead_bytes_per_gpu", "kv_bytes_per_token")
    @classmethod
    def _keys(cls, v: dict[str, int], info) -> dict[str, int]:
        return _byte_counts(v, positive=info.field_name == "kv_bytes_per_token")

    @model_validator(mode="after")
    def _hybrid_keys(self) -> "ModelSpec":
        h = self.kv_hybrid
        if h is not None:
            if set(h.state_bytes) != set(self.kv_bytes_per_token):
                raise ValueError(f"kv_hybrid.state_bytes has TP keys {sorted(h.state_bytes)}, kv_bytes_per_token "
                                 f"{sorted(self.kv_bytes_per_token)}: they must be the same")
            for k, n in self.kv_bytes_per_token.items():
                if n % h.attention_layers:
                    raise ValueError(f"kv_bytes_per_token.{k} = {n} is not a whole number of bytes a token for each "
                                     f"of kv_hybrid.attention_layers = {h.attention_layers}")
        return self

    def supports_tp(self, tp: int) -> bool:
        return f"tp{tp}" in self.kv_bytes_per_token and f"tp{tp}" in self.weight_bytes_per_gpu

    @property
    def tp_sizes(self) -> list[int]:
        """The TP sizes it is served at (those its memory facts cover), largest first."""
        return sorted((int(k[2:]) for k in self.weight_bytes_per_gpu if self.supports_tp(int(k[2:]))), reverse=True)


# ----------------------------------------------------------------------------------------- profiles


class Hardware(Strict):
    gpus: int = Field(ge=1)
    memory_gib_per_gpu: float = Field(gt=0, le=1 << 20, allow_inf_nan=False)
    name: Optional[str] = None


class Profile(Strict):
    name: str
    description: str = ""
    extends: Optional[str] = None  # "release:v0.3.2", "stock" (every variant at its stock value) or a profile
    platform: Optional[str] = None  # rocm-gfx1201, cuda, cpu: where it is served (implementation checks)
    model: Optional[str] = None
    tp: Optional[int] = Field(default=None, ge=1, strict=True)  # strict: `tp = true` is not TP 1
    hardware: Optional[Hardware] = None
    gpu_memory_utilization: Optional[float] = Field(default=None, gt=0, le=1)
    serve_args: list[str] = Field(default_factory=list)
    model_path: Optional[str] = None
    knobs: dict[str, Union[str, int, float, bool]] = Field(default_factory=dict)  # KNOB or id -> value
    env: dict[str, str] = Field(default_factory=dict)  # free-form extra environment
    strict: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", v):  # fullmatch: no trailing newline slips through
            raise ValueError(f"profile name {v!r} must be lower-case letters, digits, '.', '_' or '-'")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        """Keys a shell and ``execve`` accept as names; values without NUL: nothing printed can run code."""
        for k, val in v.items():
            if not ENV_NAME_RE.fullmatch(k):
                raise ValueError(f"env key {k!r} is not an environment variable name (letters, digits and '_', "
                                 "not starting with a digit)")
            if "\x00" in val:
                raise ValueError(f"env value of {k!r} holds a NUL character, which no environment can carry")
        return v
