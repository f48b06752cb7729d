"""The vLLM interface description: what a given vLLM version's ``vllm serve`` accepts and which variables it
reads, as data (``registry/vllm/<major.minor>.json``, generated from vLLM itself by
``scripts/vllm_interface.py``). The engine never imports vLLM; it reads that data.

API (shared with the variant tables that declare vLLM's own switches)::

    iface = load("0.32")                 # or for_version(installed_version())
    iface.flag("--kv-cache-memory-bytes")  # Flag: dest, type, choices, nargs, unit, JSON fields
    iface.env("VLLM_KV_CACHE_LAYOUT")      # EnvVar: type, default, choices
    iface.nearest_flag("--kv-cache-memory")
    iface.parse(argv)                      # problems of an argument list, abbreviations off
    iface.kernel_switches()                # every switch that chooses a kernel for the shipped models
    removed_name("VLLM_ATTENTION_BACKEND", iface)  # a removed or renamed name and its successor
"""
from __future__ import annotations

import bisect
import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Optional

from .provenance import dist_version

DATA_DIR = Path(__file__).resolve().parent / "vllm"


SUGGEST_FIRST = 20  # spelling suggestions for the first unknown flags (r9kctl shows the first problems)


def serve_options(args: list[str]) -> list[tuple[int, str, Optional[str]]]:
    """(index, option, value) of each option in a vllm serve argument list (value None for a flag)."""
    out = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and a != "-":
            if "=" in a and a.startswith("--"):
                opt, val = a.split("=", 1)
                out.append((i, opt, val))
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out.append((i, a, args[i + 1]))
                i += 1
            else:
                out.append((i, a, None))
        i += 1
    return out


@dataclass(frozen=True)
class Flag:
    options: tuple[str, ...]
    dest: str
    action: str  # store, storetrue, booleanoptional, append, ...
    type: str  # int, float, str, bool, json, json-or-str, callable
    nargs: Any = None
    choices: Optional[tuple[str, ...]] = None
    default: Any = None
    help: str = ""
    unit: Optional[str] = None
    optional: bool = False
    human_readable: bool = False
    fields: dict = field(default_factory=dict, hash=False, compare=False)  # json: field -> type (text)
    config_class: Optional[str] = None
    deprecated: bool = False
    positional: bool = False
    #: an enum vLLM's config looks up by name (``AttentionBackendEnum``): its usable members, and its name
    names: Optional[tuple[str, ...]] = None
    names_from: Optional[str] = None

    @property
    def takes_value(self) -> bool:
        return self.action not in ("storetrue", "storefalse", "booleanoptional", "enabledisable", "help", "version",
                                   "count", "storeconst") and self.nargs != 0


@dataclass(frozen=True)
class EnvVar:
    name: str
    type: Optional[str] = None
    default: Optional[str] = None
    choices: Optional[tuple[str, ...]] = None


@dataclass(frozen=True)
class Switch:
    """One switch of vLLM that chooses a kernel or backend: ``name`` as :func:`registry.vllm_map.switch_name`
    spells it (``--moe-backend``, ``--kernel-config monokernel``, ``custom op rms_norm``, ``VLLM_USE_DEEP_GEMM``),
    the values this vLLM accepts (None: a free string), its default here and the layer kind it decides."""
    name: str
    kind: str  # vllm-arg, kernel-config, custom-op, vllm-env
    values: Optional[tuple[str, ...]]
    default: Optional[str]
    decides: str
    type: str = "enum"  # enum, bool, string
    help: str = ""


#: vLLM's serve flags that choose a kernel or backend for the shipped models' layers -> (layer kind, the enum
#: whose member names the flag takes when its parser takes any string). Not here: the flags of layers no shipped
#: model has (DeepSeek's sparse indexer ``--sparse-indexer-topk-backend``, Kimi's ``--kda-*-backend``) and the
#: flags that choose no kernel (executor, offload, KV transfer backends).
KERNEL_FLAGS = {
    "--attention-backend": ("attention", "AttentionBackendEnum"),
    "--mm-encoder-attn-backend": ("attention", "AttentionBackendEnum"),
    "--moe-backend": ("moe", None),
    "--all2all-backend": ("moe", None),
    "--linear-backend": ("linear", None),
    "--gdn-prefill-backend": ("gdn", None),
    "--mamba-backend": ("gdn", "MambaBackendEnum"),
}

#: vLLM's variables that choose a kernel or backend for the shipped models (attention, Gated DeltaNet, MoE,
#: block-fp8 / MXFP4 / int4 linear, all-reduce, the model runner) on cpu, cuda and rocm -> layer kind. Values,
#: types and defaults come from each version's envs.py; a name a version lacks is absent there.
KERNEL_ENVS = {
    "VLLM_DISABLED_KERNELS": "linear", "VLLM_USE_V2_MODEL_RUNNER": "all",
    "VLLM_USE_DEEP_GEMM": "linear", "VLLM_MOE_USE_DEEP_GEMM": "moe", "VLLM_USE_DEEP_GEMM_E8M0": "linear",
    "VLLM_DEEP_GEMM_WARMUP": "warmup", "VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER": "linear",
    "VLLM_USE_FUSED_MOE_GROUPED_TOPK": "moe", "VLLM_USE_FLASHINFER_SAMPLER": "sampler",
    "VLLM_MARLIN_USE_ATOMIC_ADD": "moe", "VLLM_MXFP4_EMULATION_DEQUANT_AT_LOAD": "moe",
    "VLLM_GDN_DECODE_KERNEL": "gdn",
    "VLLM_ALLREDUCE_USE_FLASHINFER": "comm", "VLLM_ALLREDUCE_USE_SYMM_MEM": "comm",
    "VLLM_FLASHINFER_ALLREDUCE_BACKEND": "comm", "VLLM_USE_NCCL_SYMM_MEM": "comm",
    "VLLM_CPU_ATTN_SPLIT_KV": "attention", "VLLM_CPU_INT4_W4A8": "linear", "VLLM_CPU_SGL_KERNEL": "linear",
    "VLLM_CPU_OMP_THREADS_BIND": "cpu",
    "VLLM_ROCM_USE_AITER": "all", "VLLM_ROCM_USE_AITER_MOE": "moe", "VLLM_ROCM_USE_AITER_MHA": "attention",
    "VLLM_ROCM_USE_AITER_LINEAR": "linear", "VLLM_ROCM_USE_AITER_RMSNORM": "custom-op",
    "VLLM_ROCM_USE_AITER_TRITON_ROPE": "custom-op", "VLLM_ROCM_USE_AITER_TRITON_GEMM": "linear",
    "VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION": "attention", "VLLM_ROCM_USE_AITER_FP8BMM": "linear",
    "VLLM_ROCM_USE_AITER_FP4_ASM_GEMM": "linear", "VLLM_ROCM_USE_AITER_CUSTOM_AR": "comm",
    "VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS": "moe", "VLLM_ROCM_USE_SKINNY_GEMM": "linear",
    "VLLM_ROCM_FP8_PADDING": "linear", "VLLM_ROCM_MOE_PADDING": "moe", "VLLM_ROCM_MONO_DECODE": "decode",
    "VLLM_ROCM_FP8_MFMA_PAGE_ATTN": "attention",
}

#: Names vLLM removed or renamed whose successor its sources of the shipped versions no longer state (vLLM
#: >= 0.34 keeps ``removed_environment_variables`` with a hint: that is read from the description instead).
SUCCESSORS = {
    "VLLM_ATTENTION_BACKEND": "--attention-backend (the flag; the variable was removed before vLLM 0.26)",
    "VLLM_USE_V1": "nothing: V1 is vLLM's only engine since before 0.26; unset it",
    "VLLM_ROCM_MONO_DECODE": "--kernel-config monokernel (vLLM 0.33)",
    "VLLM_USE_V2_MODEL_RUNNER": "nothing: vLLM 0.34 has only the V2 model runner; unset it (0 is refused)",
    "VLLM_CPU_SGL_KERNEL": "nothing in vLLM 0.32 (the CPU backend chooses its linear kernels itself)",
}


@dataclass(frozen=True)
class Problem:
    """One fault of an argument list or environment: ``kind`` is the diagnostic code."""
    kind: str  # unknown-flag, abbreviated-flag, bad-value, missing-value, unknown-variable, bad-env-value
    message: str
    token: str = ""


class Interface:
    def __init__(self, data: dict, source: str = ""):
        self.version: str = data["vllm_version"]
        self.source = source
        self.generated = data.get("generated", {})
        self.flags: list[Flag] = []
        self._by_option: dict[str, Flag] = {}
        for f in data["flags"]:
            fl = Flag(options=tuple(f["options"]), dest=f["dest"], action=f.get("action", "store"),
                      type=f.get("type", "str"), nargs=f.get("nargs"),
                      choices=tuple(f["choices"]) if f.get("choices") is not None else None,
                      default=f.get("default"), help=f.get("help", ""), unit=f.get("unit"),
                      optional=bool(f.get("optional")), human_readable=bool(f.get("human_readable")),
                      fields=dict(f.get("fields") or {}), config_class=f.get("config_class"),
                      deprecated=bool(f.get("deprecated")), positional=bool(f.get("positional")),
                      names=tuple(f["names"]) if f.get("names") else None, names_from=f.get("names_from"))
            self.flags.append(fl)
            for o in fl.options:
                self._by_option[o] = fl
        self.envs: dict[str, EnvVar] = {
            n: EnvVar(n, e.get("type"), e.get("default"), tuple(e["choices"]) if e.get("choices") else None)
            for n, e in data["envs"].items()}
        self.removed_envs: dict[str, str] = dict(data.get("removed_envs") or {})
        self.custom_ops: dict[str, str] = dict(data.get("custom_ops") or {})
        self.enums: dict[str, list[str]] = dict(data.get("enums") or {})

    @cached_property
    def _switches(self) -> dict[str, Switch]:
        return {sw.name: sw for sw in self.kernel_switches()}

    def switch(self, name: str) -> Optional[Switch]:
        """The kernel switch ``name`` (as :meth:`kernel_switches` spells it), None when this vLLM has none."""
        return self._switches.get(name)

    def kernel_switches(self) -> list[Switch]:
        """Every switch of this vLLM that chooses a kernel or backend for the shipped models: the flags of
        :data:`KERNEL_FLAGS`, every boolean field of ``--kernel-config``, every custom op, the variables of
        :data:`KERNEL_ENVS` this version reads."""
        out: list[Switch] = []
        for opt, (decides, enum) in KERNEL_FLAGS.items():
            fl = self.flag(opt)
            if fl is None:
                continue
            vals = fl.choices if fl.choices is not None else (tuple(self.enums[enum]) if enum in self.enums else None)
            vals = tuple(v for v in vals if v != "None") if vals is not None else None
            out.append(Switch(opt, "vllm-arg", vals, None if fl.default in (None, "None") else str(fl.default),
                              decides, "enum" if vals else "string", fl.help))
        kc = self.flag("--kernel-config")
        for fld, typ in sorted((kc.fields if kc is not None else {}).items()):
            if typ == "bool":
                out.append(Switch(f"--kernel-config {fld}", "kernel-config", ("0", "1"), None,
                                  "moe" if "flashinfer" in fld else "attention" if "attn" in fld else
                                  "decode" if fld == "monokernel" else "warmup", "bool"))
        for op in self.custom_ops:
            out.append(Switch(f"custom op {op}", "custom-op", ("+", "-"), None, "custom-op", "enum",
                              f"registered in {self.custom_ops[op]}"))
        for name, decides in KERNEL_ENVS.items():
            e = self.envs.get(name)
            if e is None:
                continue
            t = (e.type or "").replace(" | None", "")
            if e.choices:
                vals, typ = e.choices, "enum"
            elif t == "bool":
                vals, typ = ("0", "1"), "bool"
            else:
                vals, typ = None, "string"
            default = e.default.strip("'\"") if e.default is not None else None
            out.append(Switch(name, "vllm-env", tuple(vals) if vals else None, default, decides, typ))
        return out

    # --- look-ups ---------------------------------------------------------------------------------
    def flag(self, option: str) -> Optional[Flag]:
        """The flag of an option string, exactly (vLLM also takes ``--a_b`` for ``--a-b``)."""
        if option in self._by_option:
            return self._by_option[option]
        if option.startswith("--"):
            return self._by_option.get("--" + option[2:].replace("_", "-"))
        return None

    def env(self, name: str) -> Optional[EnvVar]:
        return self.envs.get(name)

    def options(self) -> list[str]:
        return sorted(self._by_option)

    def nearest_flag(self, option: str) -> Optional[str]:
        """The flag an abbreviation would silently become, else the closest spelling."""
        longer = [o for o in self._by_option if o.startswith(option) and o.startswith("--")]
        if longer:
            return sorted(longer, key=len)[0]
        near = difflib.get_close_matches(option, self.options(), n=1, cutoff=0.6)
        return near[0] if near else None

    def nearest_env(self, name: str) -> Optional[str]:
        near = difflib.get_close_matches(name, sorted(self.envs), n=1, cutoff=0.6)
        return near[0] if near else None

    def unknown_env(self, name: str) -> str:
        """Why ``name`` is not a variable of this vLLM: removed or renamed (its successor), else the nearest."""
        gone = removed_name(name, self)
        if gone:
            return f"{name} is not read by vLLM {self.version}: {gone}"
        near = self.nearest_env(name)
        return f"{name} is not read by vLLM {self.version}" + (f" (nearest: {near})" if near else "")

    def abbreviation_of(self, option: str) -> list[str]:
        """The flags argparse (``allow_abbrev=True``, vLLM's default) would accept ``option`` as a prefix of."""
        if not option.startswith("--") or option in self._by_option:
            return []
        names = self._sorted_options
        out, i = [], bisect.bisect_left(names, option)
        while i < len(names) and names[i].startswith(option):  # the sorted run of names with this prefix
            out.append(names[i])
            i += 1
        return out

    @cached_property
    def _sorted_options(self) -> list[str]:
        return sorted(self._by_option)

    # --- checks -----------------------------------------------------------------------------------
    def check_value(self, fl: Flag, value: str, opt: str) -> Optional[str]:
        """Why vLLM's parser would reject ``value`` for ``fl`` (None: it accepts it)."""
        if fl.optional and value in ("", "None"):
            return None
        if fl.choices is not None and value not in fl.choices:
            return f"{opt} {value!r}: not one of {', '.join(fl.choices)}"
        if fl.names and value.upper() not in fl.names and value.lower() != "auto":
            near = difflib.get_close_matches(value.upper(), fl.names, n=3, cutoff=0.5)
            return (f"{opt} {value!r}: no usable {fl.names_from} member of that name in vLLM {self.version} (a "
                    f"placeholder such as CUSTOM must be registered before use, and nothing here registers one); "
                    f"{len(fl.names)} usable, e.g. {', '.join(near or fl.names[:3])}")
        if fl.type == "int":
            v = value.strip()
            if fl.human_readable:
                if not re.fullmatch(r"-?\d+(\.\d+)?[kKmMgGtT]?", v) and not (v == "-1"):
                    return f"{opt} {value!r}: not an integer (vLLM takes 1k, 2M, 3G too)"
            elif not re.fullmatch(r"[-+]?\d+", v):
                return f"{opt} {value!r}: not an integer"
        elif fl.type == "float":
            try:
                float(value)
            except ValueError:
                return f"{opt} {value!r}: not a number"
        elif fl.type == "json":
            try:
                obj = json.loads(value)
            except ValueError as exc:
                return f"{opt}: not JSON ({exc.msg})"
            if not isinstance(obj, dict):
                return f"{opt}: JSON object expected"
            if fl.fields:
                unknown = [k for k in obj if k not in fl.fields]
                if unknown:
                    return f"{opt}: {fl.config_class or 'the config'} has no field {', '.join(unknown)}"
        return None

    def parse(self, argv: list[str]) -> list[Problem]:
        """The faults of ``argv`` (what follows ``vllm serve``) under vLLM's parser with abbreviations off.

        Handles ``--opt value``, ``--opt=value``, ``--opt_with_underscores`` and vLLM's dotted JSON
        arguments (``--compilation-config.mode 3``)."""
        problems: list[Problem] = []
        i = 0
        positionals = 0
        while i < len(argv):
            tok = argv[i]
            i += 1
            if not tok.startswith("-") or tok == "-" or re.fullmatch(r"-\d+(\.\d+)?", tok):
                positionals += 1
                if positionals > 1:
                    problems.append(Problem("unknown-flag", f"unexpected argument {tok!r}", tok))
                continue
            if tok == "--":
                break
            opt, eq, inline = tok.partition("=")
            dotted = None
            fl = self.flag(opt)
            if fl is None and "." in opt and opt.startswith("--"):
                base, _, dotted = opt.partition(".")
                fl = self.flag(base)
                if fl is not None and fl.type != "json":
                    fl = None
            if fl is None and re.fullmatch(r"-[A-Za-z]\S+", opt):  # -O3, -tp2: a short option with its value
                fl = self.flag(opt[:2])
                if fl is not None:
                    inline, eq = opt[2:], "="
                    opt = opt[:2]
            if fl is None:
                abbrev = self.abbreviation_of(opt)
                if abbrev:
                    problems.append(Problem(
                        "abbreviated-flag", f"{opt} is not a flag of vLLM {self.version}; its parser would take it "
                        f"as an abbreviation of {abbrev[0]}" + (f" (or {', '.join(abbrev[1:3])})" if len(abbrev) > 1 else "")
                        + ": spell the flag out", opt))
                else:  # a spelling suggestion costs ~10 ms: for the first few only (the rest are not shown)
                    gone = removed_name(opt, self)
                    near = self.nearest_flag(opt) if not gone and len(problems) < SUGGEST_FIRST else None
                    problems.append(Problem("unknown-flag", f"{opt} is not a flag of vLLM {self.version}"
                                            + (f": {gone}" if gone else f" (nearest: {near})" if near else ""), opt))
                if not eq and i < len(argv) and not argv[i].startswith("-"):
                    i += 1  # its value
                continue
            if dotted is not None:
                top = dotted.split(".")[0].rstrip("+")
                if fl.fields and top not in fl.fields:
                    problems.append(Problem("bad-value", f"{opt}: {fl.config_class or 'the config'} has no field {top}",
                                            opt))
                if not eq:
                    i += 1
                continue
            if not fl.takes_value:
                if eq:
                    problems.append(Problem("bad-value", f"{opt} takes no value", tok))
                continue
            if eq:
                values = [inline]
            elif fl.nargs in ("*", "+"):
                values = []
                while i < len(argv) and not argv[i].startswith("-"):
                    values.append(argv[i])
                    i += 1
                if fl.nargs == "+" and not values:
                    problems.append(Problem("missing-value", f"{opt} needs at least one value", opt))
            elif fl.nargs == "?":
                values = []
                if i < len(argv) and not argv[i].startswith("--"):
                    values = [argv[i]]
                    i += 1
            else:
                if i >= len(argv) or (argv[i].startswith("--") and fl.type != "json"):
                    problems.append(Problem("missing-value", f"{opt} needs a value", opt))
                    continue
                values = [argv[i]]
                i += 1
            for v in values:
                why = self.check_value(fl, v, opt)
                if why:
                    problems.append(Problem("bad-value", why, opt))
        return problems

    def check_env(self, env: dict[str, str]) -> list[Problem]:
        """Every ``VLLM_*`` variable must be one this vLLM reads; declared choices must hold."""
        out = []
        for name in sorted(env):
            if not name.startswith("VLLM_"):
                continue
            e = self.envs.get(name)
            if e is None:
                out.append(Problem("unknown-variable", self.unknown_env(name), name))
            elif e.choices and env[name] not in e.choices and env[name] != "":
                out.append(Problem("bad-env-value", f"{name}={env[name]!r}: vLLM {self.version} takes one of "
                                   f"{', '.join(e.choices)}", name))
        return out


def versions() -> list[str]:
    """The versions whose description ships (``registry/vllm/*.json``), oldest first."""
    return sorted((p.stem for p in DATA_DIR.glob("*.json")), key=lambda v: tuple(int(x) for x in v.split(".")))


def series(version: str) -> str:
    """``0.32.0+cpu`` -> ``0.32``."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return f"{m.group(1)}.{m.group(2)}" if m else version


@lru_cache(maxsize=8)
def _load_path(path: str) -> Interface:
    return Interface(json.loads(Path(path).read_text(encoding="utf-8")), source=path)


def load(version: str) -> Optional[Interface]:
    """The shipped description of a vLLM version (``0.32``, ``0.32.0``, ``0.32.0+cpu``), None when none ships."""
    p = DATA_DIR / f"{series(version)}.json"
    return _load_path(str(p)) if p.exists() else None


def installed_version() -> Optional[str]:
    """The installed vLLM's version, from its distribution metadata (vLLM itself is not imported)."""
    return dist_version("vllm", "vllm-cpu")


def target(version: Optional[str] = None) -> tuple[Optional[Interface], str]:
    """The description to judge a launch by: ``version``, else the installed vLLM's, else the newest shipped.
    Returns (interface or None, the version asked for)."""
    v = version or installed_version()
    if v is None:
        shipped = versions()
        if not shipped:
            return None, "?"
        v = shipped[-1]
    return load(v), v


def _has(iface: Interface, name: str) -> bool:
    return iface.flag(name) is not None if name.startswith("-") else name in iface.envs


def removed_name(name: str, iface: Interface) -> Optional[str]:
    """How ``name`` (a flag or a variable ``iface``'s vLLM lacks) left vLLM: the shipped versions that still have
    it, vLLM's own hint (``removed_environment_variables``) and its successor (:data:`SUCCESSORS`), as one
    clause; None when no shipped version had it and no successor is known (a typo: the caller names the nearest)."""
    if _has(iface, name):
        return None
    had = [v for v in versions() if (i := load(v)) is not None and _has(i, name)]
    older = [v for v in had if _key(v) < _key(iface.version)]
    newer = [v for v in had if _key(v) > _key(iface.version)]
    hint = iface.removed_envs.get(name) or next((load(v).removed_envs[name] for v in versions()
                                                 if name in (load(v).removed_envs or {})), None)
    succ = SUCCESSORS.get(name)
    if not (had or hint or succ):
        return None
    parts = []
    if older and not newer:
        parts.append(f"removed after vLLM {older[-1]}")
    elif newer and not older:
        parts.append(f"new in vLLM {newer[0]}")
    elif had:
        parts.append(f"read by vLLM {', '.join(had)} only")
    else:
        parts.append("removed")
    if succ:
        parts.append(f"its successor is {succ}")
    if hint:
        parts.append(f"vLLM says: {hint}")
    return "; ".join(parts)


def _key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", series(v)))
