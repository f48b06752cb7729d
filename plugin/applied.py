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
    state: str  # "applied" | "mismatch" | "unverified"
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


def _row_for(r, cfg, environ) -> Optional[Row]:
    v, s = r.variant, r.variant.sets
    val = r.value
    if s.kind == "vllm-arg":
        dest = s.name.lstrip("-").replace("-", "_")
        want = val
        if dest == "kv_cache_memory":  # the knob is in GiB, vLLM keeps bytes
            dest, want = "kv_cache_memory_bytes", str(int(float(val) * 2**30))
        where, got = _find(cfg, dest)
        req = f"{s.name} {val}"
    elif s.kind == "vllm-flag":
        dest = s.name.lstrip("-").replace("-", "_")
        want = val
        where, got = _find(cfg, dest)
        req = s.name if val == "1" else "--no-" + s.name.lstrip("-")
    elif s.kind == "speculative-config":
        spec = getattr(cfg, "speculative_config", None)
        req = f"--speculative-config method={s.name} num_speculative_tokens={val}"
        if spec is None:
            return Row(v.knob, req, "None", "speculative_config", "mismatch", "vLLM runs no speculative decoding")
        got_m, got_n = getattr(spec, "method", None), getattr(spec, "num_speculative_tokens", None)
        ok = _norm(got_m) == s.name and _same(val, got_n)
        return Row(v.knob, req, f"method={_norm(got_m)} num_speculative_tokens={_norm(got_n)}",
                   "speculative_config", "applied" if ok else "mismatch")
    elif s.kind == "compilation-config":
        comp = getattr(cfg, "compilation_config", None)
        where, got = f"compilation_config.{s.name}", getattr(comp, s.name, None)
        want = val
        req = f"--compilation-config {s.name}={val}"
    elif s.kind == "attention-backend":
        att = getattr(cfg, "attention_config", None)
        where, got = "attention_config.backend", getattr(att, "backend", None)
        want = val
        req = f"attention backend {val} (VLLM_ATTENTION_BACKEND)"
    elif s.kind == "env":
        got = environ.get(s.name)
        req = f"env {s.name}={val}"
        note = "" if got == val else "the server's environment differs"
        return Row(v.knob, req, got, "environment", "applied" if got == val else "mismatch", note)
    else:
        return Row(v.knob, f"{s.kind} {s.name}={val}", None, "-", "unverified", "no way to read it back")
    if where is None:
        return Row(v.knob, req, None, "-", "unverified", f"vLLM's config has no field {dest}")
    return Row(v.knob, req, _norm(got), where, "applied" if _same(want, got) else "mismatch")


def requested_rows(rs, cfg, environ=None) -> list[Row]:
    """One row per launcher knob the launch turned into a vLLM flag or variable (values not at stock)."""
    environ = os.environ if environ is None else environ
    rows = []
    tp = getattr(getattr(cfg, "parallel_config", None), "tensor_parallel_size", None)
    rows.append(Row("(tp)", f"--tensor-parallel-size {rs.tp}", _norm(tp), "parallel_config.tensor_parallel_size",
                    "applied" if _same(str(rs.tp), tp) else "mismatch"))
    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        s = getattr(r.variant, "sets", None)
        if s is None or r.value in (None, "") or r.value == r.variant.stock:
            continue
        try:
            row = _row_for(r, cfg, environ)
        except Exception as exc:  # noqa: BLE001 - a config shape this code does not know: say so, go on
            row = Row(r.variant.knob, f"{s.kind} {s.name}={r.value}", None, "-", "unverified",
                      f"cannot read it back: {type(exc).__name__}: {exc}")
        if row is not None:
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


def compare(rs, cfg, environ=None) -> dict:
    rows = requested_rows(rs, cfg, environ)
    return {"rows": [asdict(r) for r in rows], "mismatches": [asdict(r) for r in rows if r.state == "mismatch"],
            "backends": backends(cfg)}


def table_lines(result: dict, prefix: str) -> list[str]:
    """The startup table's part: each request with what vLLM applied, then the backends."""
    rows = result["rows"]
    lines = [f"{prefix} vLLM applied: {len(rows) - len(result['mismatches'])} of {len(rows)} launcher request(s), "
             f"{len(result['mismatches'])} mismatch(es)"]
    for r in rows:
        mark = {"applied": "ok", "mismatch": "MISMATCH", "unverified": "unverified"}[r["state"]]
        lines.append(f"{prefix}   {mark:<10} {r['knob']:<12} requested {r['requested']}; applied "
                     f"{r['applied'] if r['applied'] is not None else '?'} ({r['where']})"
                     + (f": {r['note']}" if r["note"] else ""))
    b = result["backends"]
    if b:
        lines.append(f"{prefix}   backends: " + ", ".join(f"{k} {v}" for k, v in b.items()))
    return lines
