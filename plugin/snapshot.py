"""The launch snapshot: lets the engine core and the workers skip re-resolving what the first process
of the same launch has just resolved and validated from the very same inputs.

The first plugin process of a launch (the API server, or the process of an offline ``LLM``) runs the
full resolution and validation, then writes the resolved set as JSON (only what the plugin needs:
values, provenance, each variant's knob, stock value, category, graph flag and implementation) and
exports its path with a digest of its *inputs*: every ``R9K_*`` variable, the fingerprint of the
registry and profile files and of the registry code (:mod:`r9k.plugin.regcache`), and the bytes of
the manifest. A later process whose inputs have the same digest would compute exactly the same
result (resolution and validation are functions of these inputs), so it loads the snapshot instead
(~1 ms, no pydantic import). A process whose inputs differ (another environment, other registry
files) resolves in full and compares hashes, so a disagreeing worker is still caught.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from dataclasses import field as _dc_field, fields as _dc_fields
from pathlib import Path
from typing import Mapping, Optional

from r9k.registry import envvars
from r9k.registry.origin import Origin, WithOrigin

SNAPSHOT_VAR = envvars.LAUNCH_SNAPSHOT.name
INPUTS_VAR = envvars.LAUNCH_INPUTS.name
SCHEMA = "r9k-launch-snapshot/3"  # /3: typed origin per item
# Variables that differ between the processes of one launch without changing what is resolved.
_NOT_INPUTS = (envvars.STATUS_FILE.name, envvars.CACHE_DIR.name)


def encode_manifest(manifest: dict) -> str:
    """The manifest as one environment value (compact JSON, zlib, base64: ~4 KB for 147 variants)."""
    import base64
    import zlib

    raw = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode_manifest(value: str) -> dict:
    import base64
    import binascii
    import zlib

    try:
        data = json.loads(zlib.decompress(base64.b64decode(value.encode("ascii"), validate=True)))
    except (binascii.Error, zlib.error, ValueError, UnicodeError) as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(data, dict) or "hash" not in data:
        raise ValueError("no manifest in it")
    return data


def inputs_digest(environ: Mapping[str, str]) -> str:
    from .regcache import _fingerprint, default_dirs

    h = hashlib.sha256()
    for k in sorted(environ):
        if k.startswith(envvars.PREFIX) and k not in _NOT_INPUTS:
            h.update(f"{k}={environ[k]}\n".encode())
    h.update(_fingerprint(*default_dirs(environ)).encode())
    manifest = envvars.MANIFEST.get(environ)
    if manifest:
        try:
            h.update(Path(manifest).read_bytes())
        except OSError:
            h.update(b"\0unreadable manifest")
    return h.hexdigest()[:20]


# ---------------------------------------------------------------- light stand-ins of the core's objects


@dataclass
class LightImplementation:
    module: Optional[str]
    op: Optional[str]
    platforms: list[str]
    extension_point: Optional[str]


@dataclass
class LightVariant:
    id: str
    knob: str
    stock: Optional[str]
    category: str
    graph_affecting: bool
    implementation: LightImplementation
    gate_tests: list[str] = field(default_factory=list)  # read by the availability rule
    sets: Optional["LightSets"] = None  # a launcher knob's vLLM flag or variable (plugin.applied)
    vllm: Optional["LightVllm"] = None  # one of vLLM's own switches (plugin.vllm_choices)


@dataclass
class LightVllm:
    """Where one of vLLM's own switches exists and what it decides (schema ``VllmSwitch``)."""
    versions: str = ""
    platforms: list = _dc_field(default_factory=list)
    default: dict = _dc_field(default_factory=dict)
    decides: str = ""
    source: str = ""


@dataclass
class LightSets:
    """A launcher knob's declared mapping (schema ``Sets``; registry/vllm_map.py reads it)."""
    kind: str
    name: str
    text: Optional[str] = None
    field: Optional[str] = None
    fields: dict = _dc_field(default_factory=dict)
    encode: str = "str"
    unit: Optional[str] = None
    target_unit: Optional[str] = None
    program: str = "vllm"
    env: dict = _dc_field(default_factory=dict)
    path: bool = False
    reason: Optional[str] = None


@dataclass
class LightResolved(WithOrigin):
    variant: LightVariant
    value: Optional[str]
    origin: Origin
    is_stock: bool
    active: bool


@dataclass
class LightSet:
    """What the plugin reads of a ResolvedSet, rebuilt from the snapshot (a :class:`r9k.plugin.view.ResolvedView`)."""

    profile: str
    hash: str
    tp: int
    model: Optional[str]
    platform: Optional[str]
    strict: bool
    extra_env: dict[str, str]
    items: dict[str, LightResolved] = field(default_factory=dict)

    def non_stock(self) -> list[LightResolved]:
        return [r for r in self.items.values() if not r.is_stock]


def _sets_dict(s) -> dict:
    """Every field of a launcher knob's mapping (the applied-check needs units and JSON fields too)."""
    import dataclasses

    if dataclasses.is_dataclass(s):
        return dataclasses.asdict(s)
    return s.model_dump() if hasattr(s, "model_dump") else {"kind": s.kind, "name": s.name}


def dump(active) -> dict:
    rs = active.rs
    items = {}
    for vid, r in rs.items.items():
        v, impl = r.variant, r.variant.implementation
        items[vid] = {"knob": v.knob, "stock": v.stock, "category": v.category,
                      "graph_affecting": bool(v.graph_affecting),
                      "implementation": {"module": impl.module, "op": impl.op, "platforms": list(impl.platforms),
                                         "extension_point": impl.extension_point},
                      "gate_tests": list(v.gate.tests) if getattr(v, "gate", None) else list(getattr(v, "gate_tests", [])),
                      "sets": _sets_dict(v.sets) if getattr(v, "sets", None) else None,
                      "vllm": _sets_dict(v.vllm) if getattr(v, "vllm", None) else None,
                      "value": r.value, "origin": r.origin.to_dict(),
                      "is_stock": bool(r.is_stock), "active": bool(r.active)}
    return {"schema": SCHEMA, "profile": rs.profile, "hash": rs.hash, "tp": rs.tp, "model": rs.model,
            "platform": rs.platform, "strict": bool(rs.strict), "extra_env": dict(rs.extra_env),
            "origin": active.origin, "warnings": list(active.warnings), "items": items}


def load(data: dict) -> tuple[LightSet, str, list[str]]:
    if data.get("schema") != SCHEMA:
        raise ValueError("not a launch snapshot")
    ls = LightSet(data["profile"], data["hash"], int(data["tp"]), data.get("model"), data.get("platform"),
                  bool(data.get("strict")), dict(data.get("extra_env", {})))
    for vid, d in data["items"].items():
        impl = LightImplementation(**d["implementation"])
        known = {f.name for f in _dc_fields(LightSets)}
        sets = LightSets(**{k: x for k, x in d["sets"].items() if k in known}) if d.get("sets") else None
        sw = LightVllm(**{k: x for k, x in d["vllm"].items() if k in {f.name for f in _dc_fields(LightVllm)}}) \
            if d.get("vllm") else None
        v = LightVariant(vid, d["knob"], d["stock"], d["category"], d["graph_affecting"], impl,
                         list(d.get("gate_tests", [])), sets, sw)
        ls.items[vid] = LightResolved(v, d["value"], Origin.from_dict(d["origin"]), d["is_stock"], d["active"])
    return ls, data.get("origin", "launch snapshot"), list(data.get("warnings", []))


def save(active, environ=None) -> Optional[str]:
    """Write the snapshot of the first process and export where it is (None if it cannot be written)."""
    environ = os.environ if environ is None else environ
    digest = inputs_digest(environ)
    path = envvars.cache_dir(environ) / "run" / f"launch-{active.rs.hash}-{digest}.json"
    try:
        from r9k.registry import fileio

        path.parent.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write(path, json.dumps(dump(active)), "launch snapshot")
    except OSError:
        return None
    environ[SNAPSHOT_VAR] = str(path)
    environ[INPUTS_VAR] = digest
    return str(path)


def try_load(environ=None):
    """The launch's resolved set when this process has the same inputs as the first one, else None."""
    environ = os.environ if environ is None else environ
    path, digest = environ.get(SNAPSHOT_VAR), environ.get(INPUTS_VAR)
    if not path or not digest or inputs_digest(environ) != digest:
        return None
    try:
        return load(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prepare_launch(rs, warnings: list[str], env: dict) -> dict[str, str]:
    """For a launcher that has just validated ``rs`` (``r9kctl launch``): write the snapshot and return
    the variables to add to vLLM's environment, so that even the API server (the first vLLM process)
    loads the snapshot instead of resolving again. ``env`` is the complete environment vLLM will get
    (caller's environment plus what the launch exports, the manifest variable ``envvars.MANIFEST``
    included); the digest is taken over it, so a process started with anything else resolves in full.

    Call it after the manifest is written: its bytes are part of the digest.
    """
    from .startup import LAUNCH_HASH_VAR, LAUNCH_PID_VAR, Active

    active = Active(rs, None, f"manifest {envvars.MANIFEST.get(env)}, validated by r9kctl launch", list(warnings))
    scratch = dict(env)
    if save(active, scratch) is None:
        return {}
    # os.execve keeps the pid: the API server is recognised as the launch's first vLLM process.
    return {LAUNCH_HASH_VAR: rs.hash, LAUNCH_PID_VAR: str(os.getpid()), SNAPSHOT_VAR: scratch[SNAPSHOT_VAR],
            INPUTS_VAR: scratch[INPUTS_VAR]}
