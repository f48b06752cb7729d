"""The one hand-off from the launcher to every vLLM process: the resolved set as plain data.

``r9kctl launch`` writes a :class:`Manifest` (every item's value, provenance and variant facts); every vLLM
process checks its hash and :func:`registry_fingerprint` and never resolves again. Started by hand
(``envvars.PROFILE``), the first process builds it (:func:`from_resolved`). Credentials are in it by reference
only (:func:`r9k.registry.redact.reference`). :class:`Impl` is the one vocabulary for "which implementation
runs". Standard library only.
"""
from __future__ import annotations

import hashlib
import json
import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Mapping, Optional

from .origin import Origin, WithOrigin
from .redact import referenced

SCHEMA = "r9k-manifest/2"  # /2: each item carries its variant's facts and the registry fingerprint


class Impl(str, Enum):
    """Which implementation of a variant runs in a process (decided once, by the availability rule)."""

    FUSED = "fused"  # this project's kernel, installed through its adapter
    STOCK = "stock"  # at its stock value: vLLM's own path, nothing installed
    FALLBACK = "fallback"  # selected, but cannot run here: vLLM's own path, with the reason
    ENV = "env"  # an env-only knob: exported for code outside this project
    UNSET = "unset"  # no value: the implementation's own default

    def __str__(self) -> str:  # "fused", not "Impl.FUSED", in tables and JSON
        return self.value


def fused_values(type_: str, choices, stock: Optional[str]) -> tuple[str, ...]:
    """The values of a knob that select this project's implementation: a bool's ``1``, an enum's every
    choice but the stock one (none when the stock value is ``1``)."""
    if type_ == "bool":
        return () if stock == "1" else ("1",)
    return tuple(c for c in choices if c not in ("", stock))


def set_hash(model: Optional[str], tp: int, values: Mapping[str, Optional[str]], env: Mapping[str, str]) -> str:
    """12 hex chars over what the processes must agree on: model, TP size, every knob's value and the
    profile's environment (a credential by its ``redact.reference``); ``ResolvedSet.hash`` and
    :class:`Manifest` both use it."""
    payload = {"model": model, "tp": tp,
               "values": {k: v for k, v in sorted(values.items()) if v is not None},
               "env": dict(sorted(referenced(env).items()))}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# ------------------------------------------------------------------------------------------ the shape


@dataclass
class Code:
    """Where a variant's implementation is and how the plugin installs it (the TOML's ``implementation``)."""

    module: Optional[str] = None
    op: Optional[str] = None
    platforms: tuple[str, ...] = ()
    extension_point: Optional[str] = None


@dataclass
class Target:
    """What a launcher knob sets of vLLM's (the TOML's ``sets``, whole; ``registry.vllm_map.mapping`` reads it)."""

    kind: str
    name: str
    text: Optional[str] = None
    field: Optional[str] = None
    fields: dict = dataclasses.field(default_factory=dict)
    encode: str = "str"
    unit: Optional[str] = None
    target_unit: Optional[str] = None
    program: str = "vllm"
    env: dict = dataclasses.field(default_factory=dict)
    path: bool = False
    reason: Optional[str] = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict) -> "Target":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class Switch:
    """Where one of vLLM's own switches exists and what it decides (the TOML's ``vllm``; schema ``VllmSwitch``)."""

    versions: str = ""
    platforms: list = field(default_factory=list)
    default: dict = field(default_factory=dict)
    decides: str = ""
    source: str = ""
    fast: dict = field(default_factory=dict)  # the fast path per platform family (plugin/fallback.py)


@dataclass
class Facts:
    """The facts of one variant the processes of a server need."""

    id: str
    knob: str
    type: str
    stock: Optional[str]
    category: str
    graph_affecting: bool = False
    implementation: Code = field(default_factory=Code)
    gate_tests: tuple[str, ...] = ()
    sets: Optional[Target] = None
    fused_values: tuple[str, ...] = ()
    vllm: Optional[Switch] = None  # one of vLLM's own switches (plugin.report)


class StockRule:
    """Whether a value is its variant's stock, and whether it switches the variant on: the one rule for
    ``registry.resolve.Resolved`` and :class:`Item` (needs ``value`` and a ``variant`` with ``stock`` and ``type``)."""

    @property
    def is_stock(self) -> bool:
        stock = self.variant.stock
        if stock is None:
            return self.value is None
        return self.value == stock or (self.value is None and stock == "")

    @property
    def active(self) -> bool:
        """Switched on: set, and not at its stock or 'off' value."""
        if self.value in (None, ""):
            return False
        if self.variant.stock is None:
            return self.variant.type != "bool" or self.value == "1"
        return self.value != self.variant.stock


@dataclass
class Item(WithOrigin, StockRule):
    """One variant's resolved value, with where it came from."""

    variant: Facts
    value: Optional[str]
    origin: Origin

    @property
    def selects_fused(self) -> bool:
        """The value selects this project's implementation (derived from the TOML: :func:`fused_values`)."""
        return self.value is not None and self.value in self.variant.fused_values


@dataclass
class Manifest:
    """The resolved set of one server as plain data."""

    profile: str
    model: Optional[str]
    tp: int
    platform: Optional[str]
    strict: bool
    items: dict[str, Item]
    extra_env: dict[str, str] = field(default_factory=dict)  # a credential's value by reference only
    release: Optional[str] = None
    chain: list[str] = field(default_factory=list)
    serve_args: list[str] = field(default_factory=list)
    model_path: Optional[str] = None
    hardware: Optional[dict] = None
    gpu_memory_utilization: Optional[float] = None
    registry: Optional[str] = None  # registry_fingerprint() where it was resolved
    warnings: list[str] = field(default_factory=list)  # the validator's warnings at resolution
    gates: dict[str, str] = field(default_factory=dict)  # variant id -> gate state and evidence (validate.gate_labels)

    @property
    def hash(self) -> str:
        return set_hash(self.model, self.tp, {r.variant.knob: r.value for r in self.items.values()}, self.extra_env)

    def non_stock(self) -> list[Item]:
        return [r for r in self.items.values() if not r.is_stock]

    def value(self, key: str) -> Optional[str]:
        """Value by variant id or knob."""
        if key in self.items:
            return self.items[key].value
        for r in self.items.values():
            if r.variant.knob == key:
                return r.value
        raise KeyError(key)

    def knob_values(self) -> dict[str, Optional[str]]:
        return {r.variant.knob: r.value for r in sorted(self.items.values(), key=lambda r: r.variant.knob)}

    def to_dict(self) -> dict:
        values = {}
        for vid, r in sorted(self.items.items()):
            f = r.variant
            values[vid] = {"knob": f.knob, "value": r.value, "layer": r.layer, "source": r.source,
                           "origin": r.origin.to_dict(), "type": f.type, "stock": f.stock, "category": f.category,
                           "graph_affecting": f.graph_affecting,
                           "implementation": dict(f.implementation.__dict__,
                                                  platforms=list(f.implementation.platforms)),
                           "gate_tests": list(f.gate_tests),
                           "sets": f.sets.to_dict() if f.sets else None,
                           "fused_values": list(f.fused_values),
                           "vllm": dict(f.vllm.__dict__) if f.vllm else None}
        return {"schema": SCHEMA, "profile": self.profile, "model": self.model, "tp": self.tp,
                "platform": self.platform, "release": self.release, "chain": list(self.chain), "hash": self.hash,
                "strict": self.strict, "registry": self.registry, "values": values,
                "extra_env": dict(self.extra_env), "serve_args": list(self.serve_args),
                "model_path": self.model_path, "hardware": self.hardware,
                "gpu_memory_utilization": self.gpu_memory_utilization, "warnings": list(self.warnings),
                "gates": dict(self.gates)}


class ManifestError(ValueError):
    """Not a manifest this code can serve (shape, integrity or registry); the message says which."""


def shape_problem(data: object) -> Optional[str]:
    """What makes ``data`` not the shape of a manifest (None when it is right), naming the key in quotes (the
    plugin locates it in the file); ``ResolvedSet.from_manifest`` and :func:`from_dict` both check it."""
    from .fileio import json_type as kind

    if not isinstance(data, dict):
        return f"a manifest is a JSON object, not {kind(data)}"
    if not isinstance(data.get("profile"), str):
        return f"'profile' must be a string, not {kind(data.get('profile'))}"
    tp = data.get("tp", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        return f"'tp' must be a positive integer, not {tp!r}"
    vals = data.get("values", {})
    if not isinstance(vals, dict):
        return f"'values' must be an object (variant id -> {{value, layer, source}}), not {kind(vals)}"
    for vid, entry in vals.items():
        if not isinstance(entry, dict):
            return f"'values.{vid}' must be an object with a 'value', not {kind(entry)}"
        v = entry.get("value")
        if v is not None and not isinstance(v, (str, int, float, bool)):
            return f"'values.{vid}.value' must be a string or null, not {kind(v)}"
    for key, want in (("extra_env", dict), ("serve_args", list), ("chain", list)):
        if key in data and not isinstance(data[key], want):
            return f"'{key}' must be {kind(want())}, not {kind(data[key])}"
    if isinstance(data.get("extra_env"), dict) and not all(isinstance(x, str) for x in data["extra_env"].values()):
        return "'extra_env' values must be strings"
    for key in ("serve_args", "chain"):
        if isinstance(data.get(key), list) and not all(isinstance(x, str) for x in data[key]):
            return f"'{key}' must hold strings"
    if data.get("hardware") is not None and not isinstance(data["hardware"], dict):
        return f"'hardware' must be an object or null, not {kind(data['hardware'])}"
    return None


def from_dict(data: Any) -> Manifest:
    """The manifest :meth:`Manifest.to_dict` wrote; :class:`ManifestError` on another shape or a wrong hash."""
    problem = shape_problem(data)
    if problem:
        raise ManifestError(problem)
    if data.get("schema") != SCHEMA:
        raise ManifestError(f"schema {data.get('schema')!r}, this code reads {SCHEMA!r} (written by another version?)")
    try:
        items = {}
        for vid, d in data["values"].items():
            impl = d.get("implementation") or {}
            sets = d.get("sets")
            facts = Facts(vid, d["knob"], d["type"], d.get("stock"), d["category"], bool(d.get("graph_affecting")),
                          Code(impl.get("module"), impl.get("op"), tuple(impl.get("platforms") or ()),
                               impl.get("extension_point")),
                          tuple(d.get("gate_tests") or ()), Target.from_dict(sets) if sets else None,
                          tuple(d.get("fused_values") or ()),
                          Switch(**{k: x for k, x in d["vllm"].items() if k in Switch.__dataclass_fields__})
                          if d.get("vllm") else None)
            value = d.get("value")
            items[vid] = Item(facts, None if value is None else str(value), Origin.from_dict(d.get("origin") or {}))
        m = Manifest(str(data["profile"]), data.get("model"), int(data["tp"]), data.get("platform"),
                     bool(data.get("strict")), items, referenced(data.get("extra_env") or {}), data.get("release"),
                     list(data.get("chain") or []), list(data.get("serve_args") or []), data.get("model_path"),
                     data.get("hardware"), data.get("gpu_memory_utilization"), data.get("registry"),
                     list(data.get("warnings") or []), dict(data.get("gates") or {}))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ManifestError(f"not a launch manifest: {type(exc).__name__}: {exc}") from None
    if data.get("hash") != m.hash:
        raise ManifestError(f"its hash {data.get('hash')} does not match its values ({m.hash}): edited?")
    return m


def from_resolved(rs, registry: Optional[str] = None, warnings=(), gates=None) -> Manifest:
    """The manifest of a resolved set (``r9k.registry.resolve.ResolvedSet``): the one conversion."""
    items = {}
    for vid, r in rs.items.items():
        v, impl = r.variant, r.variant.implementation
        facts = Facts(vid, v.knob, v.type, v.stock, v.category, bool(v.graph_affecting),
                      Code(impl.module, impl.op, tuple(impl.platforms), impl.extension_point),
                      tuple(v.gate.tests) if v.gate else (),
                      Target.from_dict(v.sets.plain()) if v.sets else None,
                      fused_values(v.type, v.choices, v.stock) if impl.op else (),
                      Switch(**v.vllm.plain()) if v.vllm else None)
        items[vid] = Item(facts, r.value, r.origin)
    return Manifest(rs.profile, rs.model, rs.tp, rs.platform, bool(rs.strict), items, referenced(rs.extra_env),
                    rs.release, list(rs.chain), list(rs.serve_args), rs.model_path, rs.hardware,
                    rs.gpu_memory_utilization, registry, list(warnings), dict(gates or {}))


# ------------------------------------------------------------------------------------------ registry


def registry_fingerprint(root: Path, adapters: Optional[Path] = None) -> str:
    """A content hash of every ``*.toml`` under ``root`` and the adapter table."""
    h = hashlib.sha256()
    root = Path(root)
    files = sorted(root.rglob("*.toml"))
    for f in files:
        try:
            h.update(f"{f.relative_to(root).as_posix()}\0".encode() + f.read_bytes() + b"\0")
        except OSError:
            continue
    if adapters is not None and adapters.parent.resolve() != root.resolve():
        try:
            h.update(b"adapters\0" + adapters.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------ carrying


#: The key of vLLM's ``additional_config`` (``--additional-config``) the launch puts the set under.
CARRIER_KEY = "r9k"


def encode(data: dict) -> str:
    """A manifest dict as one compact string (JSON, zlib, base64): a few kB for ~150 variants."""
    import base64  # noqa: PLC0415 - (and zlib) only where a manifest is carried: not on validate's path
    import zlib  # noqa: PLC0415

    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode(value: str) -> dict:
    import base64  # noqa: PLC0415
    import binascii
    import zlib  # noqa: PLC0415

    try:
        data = json.loads(zlib.decompress(base64.b64decode(value.encode("ascii"), validate=True)))
    except (binascii.Error, zlib.error, ValueError, UnicodeError) as exc:
        raise ManifestError(f"not an encoded manifest: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError("not an encoded manifest: no JSON object in it")
    return data


def carrier(m: Manifest, server: str, path: Optional[str] = None, inline: bool = True) -> dict:
    """What ``r9kctl launch`` puts in ``--additional-config`` under :data:`CARRIER_KEY`: the set's hash and the
    manifest, ``inline`` (encoded, with the server id: for nodes without the launcher's files) or by ``path``.
    vLLM hashes ``additional_config`` into its compile-cache key, so the server id travels in envvars.SERVER."""
    out: dict = {"hash": m.hash}
    if inline or not path:
        out["server"] = server
        out["manifest"] = encode(m.to_dict())
    if path:
        out["path"] = str(path)
    return out


def from_carrier(carried: Any) -> tuple[Manifest, str]:
    """The manifest and server id of a carrier (:func:`carrier`; the id is "" unless carried inline);
    :class:`ManifestError` when it is not one, its file cannot be read here, or its hash differs."""
    if not isinstance(carried, dict) or not isinstance(carried.get("manifest", carried.get("path")), str):
        raise ManifestError(f"additional_config[{CARRIER_KEY!r}] is not an r9k carrier (no 'manifest' or 'path' string)")
    if isinstance(carried.get("manifest"), str):
        m = from_dict(decode(carried["manifest"]))
    else:
        path = carried["path"]
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ManifestError(f"the manifest file it names, {path}, cannot be read here ({exc}); a process on "
                                "another node needs the manifest inline (r9kctl launch --inline-manifest)") from None
        m = from_dict(data)
    if carried.get("hash") != m.hash:
        raise ManifestError(f"the carrier announces hash {carried.get('hash')}, its manifest is {m.hash}")
    return m, str(carried.get("server") or "")


def new_server_id(profile: str) -> str:
    """A fresh server instance id (profile, time, randomness): two servers of one profile never share one."""
    import time
    import uuid

    return f"{profile}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def first_difference(a: Mapping[str, Optional[str]], b: Mapping[str, Optional[str]]) -> Optional[str]:
    """The first knob (sorted) whose value differs between two ``knob -> value`` maps, as ``KNOB: a vs b``."""
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            return f"{k}={a.get(k)!r} vs {k}={b.get(k)!r}"
    return None
