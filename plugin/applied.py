"""What vLLM actually applied: every launcher knob's request compared with vLLM's final configuration.

A launcher knob (``sets`` in the registry: ``UTIL`` -> ``--gpu-memory-utilization``, ``CGMODE`` -> the
compilation config's ``cudagraph_mode``, ``ATTN`` -> the attention backend, ...) is turned into a vLLM flag
or variable by ``r9kctl launch``. vLLM may still not apply it: a platform overrides it (the CPU backend
has no CUDA graphs), a flag was renamed, a variable is no longer read. This module compares, once the
configuration is final, the request with what the final ``VllmConfig`` holds, and lists the backends vLLM
chose where it exposes them.

Hook (see notes/independence.md): vLLM's endpoint-plugin interface, ``EndpointPlugin.init_state(engine_client,
state, args)``, called in the API server after the engine client exists (its ``vllm_config`` is the
configuration the engine was built with). Imports nothing of vLLM itself.
"""
from __future__ import annotations

import enum
import os
from dataclasses import asdict, dataclass
from typing import Any, Optional
from ..registry.vllm_interface import installed_version, series
from ..registry.vllm_map import requests

#: Sections of VllmConfig searched for a flag's destination (``--max-num-seqs`` -> ``max_num_seqs``).
SECTIONS = ("scheduler_config", "cache_config", "model_config", "parallel_config", "load_config",
            "offload_config", "attention_config", "kernel_config", "compilation_config", "device_config",
            "speculative_config", "mamba_config")


@dataclass
class Row:
    knob: str
    requested: str  # "--max-num-seqs 16", "compilation_config.cudagraph_mode=FULL", "env HSA_ENABLE_MWAITX=1"
    applied: Optional[str]  # what the final config (or the server's environment) holds; None: not observable
    where: str  # "scheduler_config.max_num_seqs", "environment", ...
    state: str  # "applied" | "mismatch" | "unverified" | "not-applied" (a knob no launched program reads)
    note: str = ""


def _norm(v: Any) -> str:
    if v is None:
        return "None"
    if isinstance(v, enum.Enum):
        return str(v.name)
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(round(v, 9))
    if isinstance(v, (list, tuple)):
        return ",".join(_norm(x) for x in v)
    return str(v)


def _same(requested: str, applied: Any) -> bool:
    a = _norm(applied)
    if requested == a:
        return True
    try:
        return abs(float(requested) - float(a)) <= 1e-9 * max(1.0, abs(float(requested)))
    except (TypeError, ValueError):
        return requested.upper() == a.upper()


def _find(cfg, attr: str) -> tuple[Optional[str], Any]:
    """(``section.attr``, value) of the first section of ``cfg`` that has ``attr`` (one level of nesting)."""
    for sec in SECTIONS:
        obj = getattr(cfg, sec, None)
        if obj is None:
            continue
        if hasattr(obj, attr):
            return f"{sec}.{attr}", getattr(obj, attr)
        for sub in ("uva", "prefetch"):
            inner = getattr(obj, sub, None)
            if inner is not None and hasattr(inner, attr):
                return f"{sec}.{sub}.{attr}", getattr(inner, attr)
    return None, None


#: Flags whose destination is not the attribute of the same name in VllmConfig.
DEST = {"attention_backend": ("attention_config", "backend")}
#: Flags the API server keeps to itself (not in VllmConfig): read back from its parsed arguments.
SERVER_ARGS = {"chat_template"}


def _dest(option: str) -> str:
    o = option.lstrip("-")
    for neg in ("no-", "disable-"):
        if o.startswith(neg):
            o = o[len(neg):]
            if neg == "disable-":
                o = "enable-" + o
    return o.replace("-", "_")


def _row_for_request(q, cfg, environ, server_args=None) -> Row:
    """One launcher request compared with the final config (or the server's environment)."""
    req = q.text()
    if q.kind == "none":
        return Row(q.knob, f"{q.knob}={q.knob_value}", None, q.target, "not-applied", q.note)
    if q.kind == "env":
        got = environ.get(q.target)
        ok = got == str(q.value)
        reader = "vLLM" if q.program == "vllm" else q.program
        return Row(q.knob, req, got, "environment", "applied" if ok else "mismatch",
                   f"exported for {reader}" if ok else "the server's environment differs")
    if q.kind == "json-list":  # a custom op's "+op" / "-op": an entry of the final custom_ops list
        flag, _, key = q.target.partition(".")
        sec = getattr(cfg, flag.lstrip("-").replace("-", "_"), None)
        got = list(getattr(sec, key, None) or [])
        return Row(q.knob, req, _norm(got), f"{flag.lstrip('-').replace('-', '_')}.{key}",
                   "applied" if q.value in got else "mismatch")
    if q.kind == "json":
        flag, _, key = q.target.partition(".")
        sec = getattr(cfg, flag.lstrip("-").replace("-", "_"), None)
        where = f"{flag.lstrip('-').replace('-', '_')}.{key}"
        if sec is None:
            return Row(q.knob, req, "None", where, "mismatch", f"vLLM has no {flag} section (it ignored {flag})")
        got = sec.get(key) if isinstance(sec, dict) else getattr(sec, key, None)
        want = q.value
        if isinstance(want, list):
            ok = _norm(sorted(want)) == _norm(sorted(got or [])) if got is not None else False
        else:
            ok = _same(_norm(want), got)
        return Row(q.knob, req, _norm(got), where, "applied" if ok else "mismatch")
    dest = _dest(q.target)
    if dest in SERVER_ARGS:
        got = getattr(server_args, dest, None) if server_args is not None else None
        if server_args is None:
            return Row(q.knob, req, None, f"server args.{dest}", "unverified", "the server's arguments are not at hand")
        return Row(q.knob, req, _norm(got), f"server args.{dest}", "applied" if _same(str(q.value), got) else "mismatch")
    if dest in DEST:
        sec, attr = DEST[dest]
        where, got = f"{sec}.{attr}", getattr(getattr(cfg, sec, None), attr, None)
    else:
        where, got = _find(cfg, dest)
    if where is None:
        return Row(q.knob, req, None, "-", "unverified", f"vLLM's config has no field {dest}")
    if q.kind == "flag":
        want = "0" if q.target.startswith(("--no-", "--disable-")) else "1"
    else:
        want = _norm(q.value)
    return Row(q.knob, req, _norm(got), where, "applied" if _same(want, got) else "mismatch")


def validated_versions(root=None) -> tuple[Optional[str], list[str]]:
    """(the newest release, the vLLM versions it was validated on): read from the registry's release files
    (the plugin may hold only a light copy of the set, without the registry)."""
    import tomllib

    from ..registry.loader import default_registry_root

    best = None
    for f in sorted((root or default_registry_root()).joinpath("releases").glob("*.toml")):
        try:
            d = tomllib.loads(f.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            continue
        key = (str(d.get("date", "")), str(d.get("version", "")))
        if best is None or key > best[0]:
            best = (key, d.get("version"), list(d.get("vllm_validated") or []))
    return (best[1], best[2]) if best else (None, [])


def version_row(version: Optional[str] = None, root=None) -> Optional[Row]:
    """The running vLLM against the versions the newest release was validated on (a mismatch row when it
    is none of them: logged, and refused in strict mode like any mismatch)."""
    version = version or installed_version()
    release, validated = validated_versions(root)
    if not version or not validated:
        return None
    ok = series(version) in validated
    return Row("(vllm)", f"a vLLM release {release} was validated on ({', '.join(validated)})", version,
               "vLLM version", "applied" if ok else "mismatch",
               "" if ok else f"vLLM {version} is not among them: r9kctl doctor lists what breaks")


def requested_rows(rs, cfg, environ=None, server_args=None, iface=None) -> list[Row]:
    """One row per launcher request of the set (registry/vllm_map.py: every launcher knob away from stock),
    plus the tensor-parallel size."""
    environ = os.environ if environ is None else environ
    rows = []
    tp = getattr(getattr(cfg, "parallel_config", None), "tensor_parallel_size", None)
    rows.append(Row("(tp)", f"--tensor-parallel-size {rs.tp}", _norm(tp), "parallel_config.tensor_parallel_size",
                    "applied" if _same(str(rs.tp), tp) else "mismatch"))
    if iface is None:
        from ..registry.vllm_interface import target

        iface = target()[0]
    row = version_row()
    if row is not None:
        rows.append(row)
    for q in requests(rs, iface):
        try:
            row = _row_for_request(q, cfg, environ, server_args)
        except Exception as exc:  # noqa: BLE001 - a config shape this code does not know: say so, go on
            row = Row(q.knob, q.text(), None, "-", "unverified", f"cannot read it back: {type(exc).__name__}: {exc}")
        rows.append(row)
    return rows


def backends(cfg) -> dict[str, str]:
    """The backends vLLM chose, where its final config exposes them."""
    out = {}
    for label, sec, attr in (("attention", "attention_config", "backend"), ("moe", "kernel_config", "moe_backend"),
                             ("linear", "kernel_config", "linear_backend"), ("mamba/gdn", "mamba_config", "backend"),
                             ("compilation mode", "compilation_config", "mode"),
                             ("cudagraph mode", "compilation_config", "cudagraph_mode"),
                             ("executor", "parallel_config", "distributed_executor_backend"),
                             ("dtype", "model_config", "dtype"), ("device", "device_config", "device_type")):
        obj = getattr(cfg, sec, None)
        if obj is not None and hasattr(obj, attr):
            val = getattr(obj, attr)
            out[label] = "auto (vLLM chooses per layer)" if val is None and label == "attention" else _norm(val)
    return out


def compare(rs, cfg, environ=None, server_args=None) -> dict:
    rows = requested_rows(rs, cfg, environ, server_args)
    return {"rows": [asdict(r) for r in rows], "mismatches": [asdict(r) for r in rows if r.state == "mismatch"],
            "backends": backends(cfg)}


def table_lines(result: dict, prefix: str) -> list[str]:
    """The startup table's part: each request with what vLLM applied, then the backends."""
    rows = result["rows"]
    n_ok = sum(r["state"] == "applied" for r in rows)
    lines = [f"{prefix} vLLM applied: {n_ok} of {len(rows)} launcher request(s), "
             f"{len(result['mismatches'])} mismatch(es)"]
    for r in rows:
        mark = {"applied": "ok", "mismatch": "MISMATCH", "unverified": "unverified",
                "not-applied": "not applied"}[r["state"]]
        lines.append(f"{prefix}   {mark:<10} {r['knob']:<12} requested {r['requested']}; applied "
                     f"{r['applied'] if r['applied'] is not None else '?'} ({r['where']})"
                     + (f": {r['note']}" if r["note"] else ""))
    b = result["backends"]
    if b:
        lines.append(f"{prefix}   backends: " + ", ".join(f"{k} {v}" for k, v in b.items()))
    return lines


def hook_final_config(module) -> None:
    """Wrap ``VllmConfig.__post_init__`` (module ``vllm.config.vllm``): once vLLM has finished its configuration
    (platform overrides included) and before it starts the engine, compare it with the launch's requests; in
    strict mode a mismatch stops the start there, before any weights load (``r9k.plugin.check_applied``)."""
    cls = getattr(module, "VllmConfig", None)
    orig = getattr(cls, "__post_init__", None)
    if orig is None or getattr(orig, "_r9k", False):
        return

    def __post_init__(self, *a, **k):
        orig(self, *a, **k)
        from r9k import plugin

        rs = plugin.active_set()
        if rs is not None and rs.strict:
            plugin.check_applied(self)

    __post_init__._r9k = True  # type: ignore[attr-defined]
    __post_init__.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.__post_init__ = __post_init__
