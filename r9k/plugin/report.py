"""The plugin's report: what the running server says at ``GET /r9k/status``, in ``/metrics`` and in its log.

Per process: the per-op layer and call counters (:func:`layer`, :func:`hit`; lock-free, a lost increment under
a race only undercounts), what vLLM applied of the launch's launcher requests (:func:`check_applied`), what it
chose per layer kind once the model is built (:func:`on_model_built`), the KV cache predicted vs allocated
(:func:`on_engine_ready`). Each process writes its section of the status file (``envvars.STATUS_FILE``), its
counters into a file of its own beside it (:class:`_Flusher`); rank 0 keeps the cluster file of every rank's
live figures. The ``vllm.endpoint_plugins`` route answers them merged (:func:`merged_status`). Nothing here
imports vLLM at import time. The status route and file: notes/plugin.md.
"""
from __future__ import annotations

import enum
import json
import logging
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from ..registry import envvars, fileio
from ..registry.manifest import Impl
from ..registry.redact import MASK, is_secret
from ..registry.vllm_interface import installed_version, series
from ..registry.vllm_map import _active as _switch_active, mapping, requests, switch_name
from . import agree, codeid, dispatch, fallback
from .agree import STALE_AFTER_S
from .install import HOOKS
from .models import SUPERSEDED, SUPERSEDED_BY
from .startup import StartupError, _load_registry, gate_labels, process_alive

logger = logging.getLogger("vllm.r9k")

SCHEMA = "r9k-status/1"
ROUTE = "/r9k/status"
#: Seconds between two looks of a process's flusher at its counters (a write only when they changed).
FLUSH_INTERVAL_S = 1.0

# This process's report (set by register(); None where the plugin is inactive).
_active = None
_proc = None
_status_path: Optional[str] = None
_applied: Optional[dict] = None  # what vLLM applied of the launch's requests (API server)
_choices: Optional[dict] = None  # what vLLM chose per layer (a model-building process)
_kv: Optional[dict] = None  # the KV-cache comparison (API server, once the engine is ready)
_ranks: Optional[list] = None  # every rank's record, once the ranks agreed (agree.agree)
_live = None  # (agree.LivePublisher, this rank's agreement record), once the ranks agreed
_flusher = None


def active_set():
    """The resolved set of this process (None when inactive); for code that reads knob values."""
    return _active.rs if _active is not None else None


def _prefix() -> str:
    return f"r9k {_active.hash if _active else '?'}:"


def emit(level: int, line: str) -> None:
    """Log through vLLM's logging, or straight to stderr until vLLM has configured it (the API server loads
    the plugins before it does)."""
    if logging.getLogger("vllm").handlers or logging.getLogger().handlers:
        logger.log(level, "%s", line)
    else:
        sys.stderr.write(f"{logging.getLevelName(level)} [r9k.plugin] {line}\n")


def write_status(table) -> None:
    """This process's section into the status file (informative: a write failure never stops the server)."""
    if _active is None or _status_path is None:
        return
    try:
        write_section(_status_path, section(_active, table, _proc, _applied, _ranks))
    except OSError as exc:
        logger.warning("r9k: cannot write the status file %s: %s", _status_path, exc)


def own_section() -> Optional[dict]:
    """This process's section now (None where the plugin is inactive)."""
    return section(_active, dispatch.get_table(), _proc, _applied, _ranks) if _active is not None else None


def current_status() -> dict:
    """The status the ``/r9k/status`` route answers (this process merged with the status file)."""
    return merged_status(own_section(), _status_path or envvars.STATUS_FILE.get())


def reset_for_tests() -> None:
    """Forget this process's report and registration (unit tests only)."""
    global _active, _proc, _status_path, _applied, _ranks, _live, _flusher
    from .. import plugin

    if _flusher is not None:
        _flusher.stop.set()
    _active = _proc = _status_path = _applied = _ranks = _live = _flusher = None
    plugin._done, plugin._error = False, None
    dispatch.set_table(None)


# --- counters --------------------------------------------------------------------------------------------

#: op -> {"installed": [layer], "kept": {reason: [layer]}}; filled at model construction.
_LAYERS: dict[str, dict] = {}
#: op -> {path: calls since process start}.
_CALLS: dict[str, dict[str, int]] = {}


def layer(op: str, layer_name: str, installed: bool, reason: str = "") -> None:
    """Record, at model construction, whether one layer instance runs ``op``'s kernel."""
    entry = _LAYERS.get(op)
    if entry is None:
        entry = _LAYERS[op] = {"installed": [], "kept": {}}
    if installed:
        entry["installed"].append(layer_name)
    else:
        entry["kept"].setdefault(reason or "unspecified", []).append(layer_name)


def relabel(op: str, layer_name: str, installed: bool, reason: str = "") -> None:
    """Move a layer recorded by :func:`layer` (e.g. found ineligible once its weights are known)."""
    entry = _LAYERS.get(op)
    if entry is not None:
        if layer_name in entry["installed"]:
            entry["installed"].remove(layer_name)
        for r, names in list(entry["kept"].items()):
            if layer_name in names:
                names.remove(layer_name)
                if not names:
                    del entry["kept"][r]
    layer(op, layer_name, installed, reason)


def hit(op: str, path: str = "fused") -> None:
    """Count one call of ``op``: ``path`` is ``"fused"`` or ``"fallback:<why>"``."""
    try:
        _CALLS[op][path] += 1
    except KeyError:  # first call of this op or path
        _CALLS.setdefault(op, {}).setdefault(path, 0)
        _CALLS[op][path] += 1


def snapshot() -> dict:
    """A copy: ``{op: {"installed": [...], "kept": {reason: [...]}, "calls": {path: n}}}``."""
    out: dict[str, dict] = {}
    for op, entry in _LAYERS.items():
        out[op] = {"installed": list(entry["installed"]),
                   "kept": {r: list(names) for r, names in entry["kept"].items()},
                   "calls": {}}
    for op, paths in list(_CALLS.items()):
        out.setdefault(op, {"installed": [], "kept": {}, "calls": {}})["calls"] = dict(paths)
    return out


def calls(op: str, path: str = "fused") -> int:
    """Calls of ``op`` on ``path`` so far (tests, benchmarks)."""
    return _CALLS.get(op, {}).get(path, 0)


def reset() -> None:
    """Forget everything (tests only)."""
    _LAYERS.clear()
    _CALLS.clear()


# --- kvcache ---------------------------------------------------------------------------------------------

def kv_applied_args(vllm_config) -> list[str]:
    """The vLLM arguments a hybrid model's capacity depends on (``--max-model-len``, prefix caching) as vLLM
    applied them: a launch's extra arguments or vLLM's defaults may differ from the profile's ``serve_args``."""
    out: list[str] = []
    n = getattr(getattr(vllm_config, "model_config", None), "max_model_len", None)
    if isinstance(n, int) and n > 0:
        out += ["--max-model-len", str(n)]
    pc = getattr(getattr(vllm_config, "cache_config", None), "enable_prefix_caching", None)
    if isinstance(pc, bool):
        out.append("--enable-prefix-caching" if pc else "--no-enable-prefix-caching")
    return out


def kv_predicted(active, vllm_config=None) -> tuple[Optional[int], str]:
    """The registry's KV tokens for the active set (at :func:`kv_applied_args` of ``vllm_config``) and its basis."""
    from ..registry.memory import budget
    from ..registry.resolve import ResolvedSet
    reg = _load_registry()
    rs = ResolvedSet.from_manifest(active.rs.to_dict(), reg)  # the engine's shape of the manifest, for budget()
    applied = kv_applied_args(vllm_config)
    rs.serve_args = list(rs.serve_args) + applied  # vLLM's last value of an option wins, as in its parser
    b = budget(reg, rs)
    if b is None:
        return None, f"no memory budget for model {rs.model} at TP{rs.tp} (registry/models.toml)"
    how = "fixed KV budget" if b.fixed_kv_bytes is not None else f"UTIL {b.utilization:g}"
    at = f", max-model-len {b.hybrid.max_model_len} as vLLM applied it" if b.hybrid is not None and applied else ""
    return b.kv_tokens, f"registry budget ({rs.model}, TP{rs.tp}, {how}{at})"


def kv_allocated(vllm_config) -> dict:
    """What vLLM allocated: blocks, block size, blocks x block size, and vLLM's own capacity figure."""
    cc = getattr(vllm_config, "cache_config", None)
    blocks = getattr(cc, "num_gpu_blocks", None)
    size = getattr(cc, "block_size", None)
    return {"blocks": blocks, "block_size": size,
            "allocated_tokens": blocks * size if blocks and size else None,
            "vllm_capacity_tokens": getattr(cc, "kv_cache_size_tokens", None)}


def kv_compare(pred: Optional[int], basis: str, alloc: dict) -> dict:
    """The report: prediction, allocation and the difference (allocated - predicted)."""
    actual = alloc.get("vllm_capacity_tokens") or alloc.get("allocated_tokens")
    rep = {"predicted_tokens": pred, "predicted_basis": basis, **alloc, "actual_tokens": actual,
           "difference_tokens": None, "difference_pct": None}
    if pred is not None and actual is not None:
        rep["difference_tokens"] = actual - pred
        rep["difference_pct"] = 100.0 * (actual - pred) / pred if pred else None
    return rep


def kv_line(rep: dict) -> str:
    """One line for the startup log and ``r9kctl status``."""
    def n(x):
        return "-" if x is None else f"{x:,}"

    alloc = f"{n(rep.get('blocks'))} blocks x {n(rep.get('block_size'))}"
    diff = "-" if rep.get("difference_tokens") is None else (
        f"{rep['difference_tokens']:+,}" + (f" ({rep['difference_pct']:+.1f}%)" if rep.get("difference_pct") is not
                                             None else ""))
    return (f"KV cache: predicted {n(rep.get('predicted_tokens'))} tokens ({rep.get('predicted_basis')}), "
            f"allocated {n(rep.get('actual_tokens'))} tokens ({alloc}), difference {diff}")


def on_engine_ready(engine_client) -> Optional[dict]:
    """Called once the engine is up (the endpoint plugin's ``init_state``): compute, log, record."""
    global _kv
    if _active is None:
        return None
    try:
        pred, basis = kv_predicted(_active, getattr(engine_client, "vllm_config", None))
    except Exception as exc:  # the comparison is informative; never stop the server for it
        pred, basis = None, f"no prediction: {exc}"
    _kv = kv_compare(pred, basis, kv_allocated(getattr(engine_client, "vllm_config", None)))
    emit(logging.INFO, f"r9k {_active.hash}: {kv_line(_kv)}")
    try:
        write_status(dispatch.get_table())
    except Exception as exc:  # noqa: BLE001
        logger.warning("r9k: cannot record the KV-cache comparison: %s", exc)
    return _kv


# --- applied ---------------------------------------------------------------------------------------------

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


def _choice_norm(v: Any) -> str:
    """A vLLM choice's spelling: an object's (or enum member's) name, else as :func:`_norm`."""
    return _norm(v) if isinstance(v, (bool, type(None))) else str(getattr(v, "name", v))


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
    if q.kind in ("json-list", "json"):
        flag, _, key = q.target.partition(".")
        name = flag.lstrip("-").replace("-", "_")
        sec, where = getattr(cfg, name, None), f"{name}.{key}"
        if q.kind == "json-list":  # a custom op's "+op" / "-op": an entry of the final custom_ops list
            got = list(getattr(sec, key, None) or [])
            return Row(q.knob, req, _norm(got), where, "applied" if q.value in got else "mismatch")
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
        if server_args is None:
            return Row(q.knob, req, None, f"server args.{dest}", "unverified", "the server's arguments are not at hand")
        got = getattr(server_args, dest, None)
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
    """(the newest release, the vLLM versions it was validated on), from the registry's release files."""
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
    """The running vLLM against the versions the newest release was validated on (a mismatch row if none)."""
    version = version or installed_version()
    release, validated = validated_versions(root)
    if not version or not validated:
        return None
    ok = series(version) in validated
    return Row("(vllm)", f"a vLLM release {release} was validated on ({', '.join(validated)})", version,
               "vLLM version", "applied" if ok else "mismatch",
               "" if ok else f"vLLM {version} is not among them: r9kctl doctor lists what breaks")


def requested_rows(rs, cfg, environ=None, server_args=None, iface=None) -> list[Row]:
    """One row per launcher request of the set (registry/vllm_map.py), plus the TP size and vLLM version."""
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


def applied_compare(rs, cfg, environ=None, server_args=None) -> dict:
    rows = requested_rows(rs, cfg, environ, server_args)
    return {"rows": [asdict(r) for r in rows], "mismatches": [asdict(r) for r in rows if r.state == "mismatch"],
            "backends": backends(cfg)}


def applied_lines(result: dict, prefix: str) -> list[str]:
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


def check_applied(vllm_config, server_args=None) -> Optional[dict]:
    """Compare the launch's launcher requests with vLLM's final config; log, record, and in strict mode stop
    the start on a mismatch."""
    global _applied
    if _active is None:
        return None
    result = applied_compare(_active.rs, vllm_config, None, server_args)
    _applied = result
    level = logging.WARNING if result["mismatches"] else logging.INFO
    for line in applied_lines(result, _prefix()):
        emit(level, line)
    write_status(dispatch.get_table())
    if result["mismatches"] and _active.rs.strict:
        raise StartupError([f"error[not-applied]: {m['knob']}: requested {m['requested']}, vLLM applied "
                            f"{m['applied']} ({m['where']}) (strict mode)" for m in result["mismatches"]],
                           "r9k: vLLM did not apply what the launch requested; refusing to serve")
    return result


def hook_final_config(module) -> None:
    """Wrap ``VllmConfig.__post_init__``: in strict mode, the final config (platform overrides included) is
    compared with the launch's requests before any weights load (:func:`check_applied`)."""
    cls = getattr(module, "VllmConfig", None)
    orig = getattr(cls, "__post_init__", None)
    if orig is None or getattr(orig, "_r9k", False):
        return

    def __post_init__(self, *a, **k):
        orig(self, *a, **k)
        rs = active_set()
        if rs is not None and rs.strict:
            check_applied(self)

    __post_init__._r9k = True  # type: ignore[attr-defined]
    __post_init__.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.__post_init__ = __post_init__


# --- vllm_choices ----------------------------------------------------------------------------------------

def choices_current() -> Optional[dict]:
    """This process's reading (None until a model is built here)."""
    return _choices


# --- reading the built model ------------------------------------------------------------------------------

def _name(obj) -> Optional[str]:
    if obj is None:
        return None
    if hasattr(obj, "name") and not isinstance(obj, type) and hasattr(type(obj), "__members__"):
        return str(obj.name)  # an enum member
    return (obj if isinstance(obj, type) else type(obj)).__name__


def _bump(table: dict, kind: str, key: str, path: str, **extra) -> None:
    e = table.setdefault(kind, {}).setdefault(key, {"layers": 0, "first": path, **extra})
    e["layers"] += 1


def _moe_backend(qm) -> Optional[str]:
    for attr in ("unquantized_backend", "fp8_backend", "mxfp4_backend", "moe_backend", "backend"):
        v = getattr(qm, attr, None)
        if v is not None:
            return _name(v) if not isinstance(v, str) else v
    return None


def _moe_kernel(qm) -> Optional[str]:
    k = getattr(qm, "moe_kernel", None)
    if k is not None:
        inner = getattr(k, "fused_experts", None)
        return _name(inner) if inner is not None else _name(k)
    cls = getattr(qm, "experts_cls", None)
    return _name(cls) if cls is not None else None


def tuned_moe_config(E: int, N: int, dtype: Optional[str], block_shape=None) -> dict:
    """The tuned config file vLLM's Triton MoE looks for at this shape, and whether one exists (vLLM's lookup
    order: ``VLLM_TUNED_CONFIG_FOLDER``, then its ``configs`` folder)."""
    from vllm.model_executor.layers.fused_moe import fused_moe as fm

    name = fm.get_config_file_name(E, N, dtype, block_shape)
    folders = [os.environ.get("VLLM_TUNED_CONFIG_FOLDER")] if os.environ.get("VLLM_TUNED_CONFIG_FOLDER") else []
    folders.append(os.path.join(os.path.dirname(os.path.realpath(fm.__file__)), "configs"))
    found = next((os.path.join(d, name) for d in folders if os.path.exists(os.path.join(d, name))), None)
    return {"E": E, "N": N, "dtype": dtype, "file_name": name, "file": found,
            "source": "tuned file" if found else "default rules (no tuned file for this device and shape)"}


def read_model(model, vllm_config=None) -> dict:
    """vLLM's selections in a built model: per layer kind, the choice and how many layers made it."""
    from vllm.model_executor.custom_op import CustomOp

    layers: dict[str, dict] = {}
    ops: dict[str, dict] = {}
    tuned: dict[str, dict] = {}
    for path, m in model.named_modules():
        backend = getattr(m, "attn_backend", None)
        if backend is not None and hasattr(m, "impl"):
            try:
                bname = backend.get_name()
            except Exception:  # noqa: BLE001 - a backend without a name: its class
                bname = _name(backend)
            _bump(layers, "attention", str(bname), path, impl=_name(m.impl))
        qm = getattr(m, "quant_method", None)
        is_moe = type(m).__name__ in ("FusedMoE", "SharedFusedMoE") or hasattr(m, "moe_config")
        if qm is not None and is_moe:
            be = _moe_backend(qm)
            _bump(layers, "moe", be or _name(qm), path, method=_name(qm), kernel=_moe_kernel(qm))
            if be and "TRITON" in be.upper():
                E = getattr(m, "local_num_experts", None) or getattr(m, "global_num_experts", None)
                N = getattr(m, "intermediate_size_per_partition", None)
                if E and N:
                    try:
                        t = tuned_moe_config(int(E), int(N), None)
                        tuned.setdefault(t["file_name"], dict(t, first=path))
                    except Exception as exc:  # noqa: BLE001 - say why it is not known
                        tuned.setdefault(path, {"source": f"unknown: {type(exc).__name__}: {exc}"})
            elif be:
                tuned.setdefault(f"backend {be}", {"source": f"not used: the {be} MoE backend reads no Triton MoE "
                                                             "config", "first": path})
        elif qm is not None and type(m).__name__.endswith("Linear"):
            kern = getattr(qm, "kernel", None)
            key = _name(kern) if kern is not None else _name(qm)
            _bump(layers, "linear", key, path, method=_name(qm))
        gdn = getattr(m, "gdn_decode_kernel", None)
        if isinstance(gdn, str):
            _bump(layers, "gdn", gdn, path)
        if isinstance(m, CustomOp) and hasattr(type(m), "name"):
            fm = getattr(m, "_forward_method", None)
            fname = getattr(fm, "__name__", None) or _name(fm)
            e = ops.setdefault(type(m).name, {"layers": 0, "path": fname, "first": path})
            e["layers"] += 1
    cc = getattr(vllm_config, "compilation_config", None) if vllm_config is not None else None
    if cc is None:
        try:
            from vllm.config import get_cached_compilation_config

            cc = get_cached_compilation_config()
        except Exception:  # noqa: BLE001
            cc = None
    enabled = set(getattr(cc, "enabled_custom_ops", ()) or ())
    disabled = set(getattr(cc, "disabled_custom_ops", ()) or ())
    for name, e in ops.items():
        e["enabled"] = name in enabled if (name in enabled or name in disabled) else None
    return {"layers": layers, "custom_ops": ops, "moe_tuned_config": tuned,
            "custom_ops_setting": list(getattr(cc, "custom_ops", []) or [])}


def r9k_tuned() -> dict:
    """Per loaded kernel package: the tuned-config file for this device, or the default rules."""
    out = {}
    for modname, mod in sorted(list(sys.modules.items())):
        f = getattr(mod, "TUNED_FILE", None) if modname.startswith("r9k.kernels.") else None
        if not isinstance(f, str):
            continue
        pkg = modname.removeprefix("r9k.kernels.")
        ok = os.path.exists(f)
        out[pkg] = {"device": os.path.basename(f).removeprefix("tuned_").removesuffix(".json"), "file": f if ok else None,
                    "source": "tuned file" if ok else "default rules (no tuned file for this device)"}
    return out


# --- requested vs chosen --------------------------------------------------------------------------------

#: the switches that choose a backend per layer kind: flag, or json field of a config section -> layer kind
_BACKEND_FLAGS = {"--moe-backend": "moe", "--linear-backend": "linear"}
_BACKEND_FIELDS = {"moe_backend": "moe", "linear_backend": "linear"}


def choices_compare(rs, chosen: dict, vllm_config=None, environ=None) -> list[dict]:
    """One row per vLLM switch of ``rs`` away from stock: requested, chosen, layer kind, state (applied,
    mismatch, or unverified where the built model shows nothing)."""
    environ = os.environ if environ is None else environ
    rows = []
    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        var = r.variant
        if var.vllm is None or var.sets is None or not _switch_active(r):
            continue
        m = mapping(var.sets)
        row = {"knob": var.knob, "switch": switch_name(var), "layer": var.vllm.decides, "requested": r.value,
               "chosen": None, "state": "unverified", "note": ""}
        want = r.value
        backend = _BACKEND_FLAGS.get(m.name) or (_BACKEND_FIELDS.get(m.field) if m.kind == "json-field" else None)
        if m.kind == "custom-op":
            e = chosen.get("custom_ops", {}).get(m.name)
            if e is None or e.get("enabled") is None:
                row["note"] = f"the model has no {m.name} layer"
            else:
                row.update(chosen=("+" if e["enabled"] else "-") + f" ({e['path']}, {e['layers']} layer(s))",
                           state="applied" if e["enabled"] == (want == "+") else "mismatch")
        elif m.name == "--attention-backend":
            got = sorted(chosen.get("layers", {}).get("attention", {}))
            if got:
                row.update(chosen=", ".join(got), state="applied" if got == [want] else "mismatch")
            else:
                row["note"] = "the model has no attention layer"
        elif backend:
            got = {k: e for k, e in chosen.get("layers", {}).get(backend, {}).items()
                   if backend == "moe" or "Unquantized" not in (e.get("method") or "")}
            if not got:
                row["note"] = ("the model has no MoE layer" if backend == "moe"
                               else "no quantised linear layer: the linear backend chooses for none")
            else:
                ok = want == "auto" or all(fallback._flat(want) in fallback._flat(k) for k in got)
                row.update(chosen=", ".join(sorted(got)), state="applied" if ok else "mismatch")
        elif m.kind == "json-field":
            sec = getattr(vllm_config, m.name.lstrip("-").replace("-", "_"), None) if vllm_config is not None else None
            if sec is not None and hasattr(sec, m.field or ""):
                got = _choice_norm(getattr(sec, m.field))
                row.update(chosen=got, state="applied" if got == want else "mismatch")
        elif m.kind == "env":
            have = environ.get(m.name)
            try:
                import vllm.envs as venvs

                got = _choice_norm(getattr(venvs, m.name))  # vLLM's own reading of the variable
            except Exception:  # noqa: BLE001
                got = have
            ok = have == want and (got == want or _choice_norm(got) == want)
            row.update(chosen=f"{got} (vllm.envs.{m.name})", state="applied" if ok else "mismatch")
            if var.vllm.decides in chosen.get("layers", {}):
                row["note"] = "decides for " + ", ".join(
                    f"{k} ({e['layers']} layer(s))" for k, e in sorted(chosen["layers"][var.vllm.decides].items()))
        rows.append(row)
    return rows


def choices_build(rs, model, vllm_config=None, environ=None, process: str = "") -> dict:
    chosen = read_model(model, vllm_config)
    rows = choices_compare(rs, chosen, vllm_config, environ)
    return dict(chosen, process=process, rows=rows, mismatches=[r for r in rows if r["state"] == "mismatch"],
                r9k_tuned=r9k_tuned())


def choices_lines(res: dict, prefix: str) -> list[str]:
    """The startup table's part: vLLM's choices per layer kind, then each requested switch."""
    lines = [f"{prefix} vLLM chose, per layer kind:"]
    for kind, d in sorted(res["layers"].items()):
        lines.append(f"{prefix}   {kind}: " + "; ".join(
            f"{k} x{e['layers']}" + (f" ({e.get('method') or e.get('impl') or ''}"
                                     + (f", kernel {e['kernel']}" if e.get("kernel") else "") + ")"
                                     if e.get("method") or e.get("impl") else "") for k, e in sorted(d.items())))
    if res["custom_ops"]:
        lines.append(f"{prefix}   custom ops: " + ", ".join(
            f"{'+' if e['enabled'] else '-' if e['enabled'] is not None else '?'}{n}" for n, e in
            sorted(res["custom_ops"].items())))
    for k, t in sorted(res["moe_tuned_config"].items()):
        lines.append(f"{prefix}   MoE config {k}: {t['source']}")
    for r in res["rows"]:
        mark = {"applied": "ok", "mismatch": "MISMATCH", "unverified": "unverified"}[r["state"]]
        lines.append(f"{prefix}   {mark:<10} {r['knob']} requested {r['requested']} ({r['switch']}, {r['layer']}); "
                     f"vLLM chose {r['chosen'] if r['chosen'] is not None else '?'}"
                     + (f": {r['note']}" if r["note"] else ""))
    for pkg, t in sorted(res.get("r9k_tuned", {}).items()):
        lines.append(f"{prefix}   r9k kernels {pkg}: {t['source']} (device {t['device']})")
    return lines


# --- the hook --------------------------------------------------------------------------------------------

#: The model runners whose ``load_model`` is wrapped: V1 and V2 of the GPU and CPU workers (0.34 has no V1 GPU
#: runner; a subclass inherits the wrapped method). ``r9kctl doctor`` checks each runner the workers use is here.
RUNNERS = (("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"), ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"),
           ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"), ("vllm.v1.worker.cpu.model_runner", "CPUModelRunner"))
HOOKED = "load_model"


def on_model_built(runner) -> None:
    """Read, record and log the built model of ``runner``; strict: a mismatch stops the start."""
    global _choices
    rs = active_set()
    model = getattr(runner, "model", None)
    if rs is None or model is None:
        return
    try:
        model = runner.get_model() if hasattr(runner, "get_model") else model
    except Exception:  # noqa: BLE001
        pass
    proc = _proc
    res = choices_build(rs, model, getattr(runner, "vllm_config", None), process=getattr(proc, "name", ""))
    _choices = res
    fallback.check(rs, res, lambda ln: emit(logging.WARNING, ln))
    res["not_installed"] = absent = not_installed()
    for ln in absent:
        emit(logging.WARNING, f"r9k: NOT INSTALLED {ln}")
    emit_level = logging.WARNING if res["mismatches"] else logging.INFO
    for line in choices_lines(res, _prefix()):
        emit(emit_level, line)
    write_status(dispatch.get_table())
    if rs.strict:
        fallback.refuse(res["fallbacks"])
        if absent:
            raise StartupError([f"error[not-installed]: {ln} (strict mode)" for ln in absent],
                               "r9k: a requested kernel runs in no layer of this model; refusing to serve")
    if res["mismatches"] and rs.strict:
        raise StartupError([f"error[not-chosen]: {r['knob']}: requested {r['requested']} ({r['switch']}), vLLM "
                            f"chose {r['chosen']} for {r['layer']} (strict mode)" for r in res["mismatches"]],
                           "r9k: vLLM did not make the requested kernel choice; refusing to serve")


def not_installed() -> list[str]:
    """One line per variant chosen fused whose adapter's layer class the built model has none of (e.g. vLLM
    0.26's Qwen2-MoE builds its router as a ReplicatedLinear, not a GateLinear)."""
    table = dispatch.get_table()
    out = []
    for p in (table.plans.values() if table is not None else ()):
        if p.state == Impl.FUSED and p.pluggable and p.op and p.layers == 0:
            cls = getattr(p.adapter, "vllm_class", None) or p.extension_point
            out.append(f"{p.knob}={p.value}: the model built no {cls} layer ({p.extension_point}), so {p.op} "
                       "runs nowhere and vLLM's own path serves")
    return out


def _wrap_runner(module, cls_name: str) -> None:
    cls = getattr(module, cls_name, None)
    orig = cls.__dict__.get(HOOKED) if cls is not None else None
    if orig is None or getattr(orig, "_r9k_choices", False):
        return

    def load_model(self, *a, **k):
        out = orig(self, *a, **k)
        if not getattr(self, "_r9k_choices_read", False):  # a subclass calling its parent's: read once
            self._r9k_choices_read = True
            on_model_built(self)
        return out

    load_model._r9k_choices = True  # type: ignore[attr-defined]
    load_model.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.load_model = load_model


def install_choice_hooks() -> None:
    """Wrap the model runners' ``load_model`` (post-import hooks: nothing of vLLM is imported here)."""
    for mod, cls in RUNNERS:
        HOOKS.add(mod, lambda module, cls=cls: _wrap_runner(module, cls))


# --- status ----------------------------------------------------------------------------------------------


def section(active, table, proc, applied: Optional[dict] = None, ranks: Optional[list] = None) -> dict:
    """This process's section of the status: the set, its plan, counters and what vLLM applied and chose."""
    rs = active.rs
    plans = table.plans if table is not None else {}
    non_stock = []
    for r in sorted(rs.non_stock(), key=lambda r: r.variant.knob):
        p = plans.get(r.variant.id)
        non_stock.append({"variant": r.variant.id, "knob": r.variant.knob, "value": r.value,
                          "stock": r.variant.stock, "layer": r.layer, "source": r.source,
                          "implementation": p.describe() if p else None,
                          "mode": p.state if p else None})
    return {
        "profile": rs.profile, "hash": rs.hash, "tp": rs.tp, "model": rs.model, "platform": rs.platform,
        "origin": active.origin, "strict": rs.strict, "server": active.server,
        "process": {"name": proc.name, "pid": proc.pid, "role": proc.role, "rank": proc.rank,
                    "node": proc.node, "started": proc.started},
        "values": {r.variant.knob: r.value for r in rs.items.values() if r.value is not None},
        "non_stock": non_stock,
        "in_use": table.in_use() if table is not None else {},
        "plan": plan_counts(table),
        "op_variants": dict(table.by_op) if table is not None else {},
        "counters": snapshot(),
        "code": codeid.snapshot(table),  # the kernels' source identity as loaded (plugin/codeid.py)
        "applied": applied,
        "kv_cache": _kv,  # predicted vs allocated, once the engine is ready (on_engine_ready)
        "ranks": ranks,  # every rank's record, where this process took part in the ranks' agreement
        "vllm_choices": _choices,  # vLLM's kernel choices per layer, once the model is built here
        "time": time.time(),
    }


def superseded(ops: dict, op_variants: dict, plans: Optional[dict] = None) -> dict[str, str]:
    """variant id -> ``"<variant>: superseded by <op> in N layers"`` for each switched-on variant that takes second
    place to another (``r9k.plugin.models.SUPERSEDED_BY``). ``ops``: per op, ``kept`` as {reason: layer names or
    a count}. Before the model is built, ``plans`` (variant id -> mode) decides without a count."""
    out: dict[str, str] = {}
    for op, by in SUPERSEDED_BY.items():
        vid = op_variants.get(op)
        if vid is None:
            continue
        o = ops.get(op) or {}
        n = sum(v if isinstance(v, int) else len(v) for r, v in (o.get("kept") or {}).items()
                if r == SUPERSEDED + by)
        inst = o.get("installed") or 0
        inst = inst if isinstance(inst, int) else len(inst)
        if n:
            out[vid] = f"{vid}: superseded by {by} in {n} layer(s)" + (f"; runs in {inst}" if inst else "")
        elif not o and plans is not None and plans.get(vid) == "fused" \
                and plans.get(op_variants.get(by, "")) == "fused":
            out[vid] = f"{vid}: superseded by {by} wherever both run (layers counted when the model is built)"
    return out


def plan_counts(table) -> dict:
    """The availability counts of this process's plan (``r9kctl validate`` prints the same numbers)."""
    plans = table.plans.values() if table is not None else []
    modes = [p.state for p in plans]
    return {"installed": modes.count(Impl.FUSED), "fallback": modes.count(Impl.FALLBACK),
            "env_only": modes.count(Impl.ENV),
            "fallbacks": {p.knob: p.reason for p in plans if p.state is Impl.FALLBACK}}


def merge_ops(sections: list[dict]) -> dict:
    """Per op over the processes: layers as the first process that recorded any reports them, per process
    figures, calls summed."""
    ops: dict[str, dict] = {}
    for sec in sections:
        name = sec["process"]["name"]
        for op, c in (sec.get("counters") or {}).items():
            o = ops.setdefault(op, {"installed": 0, "kept": {}, "installed_layers": [], "kept_layers": {},
                                    "calls": {}, "by_process": {}})
            o["by_process"][name] = {"installed": len(c.get("installed", [])),
                                     "kept": {r: len(v) for r, v in c.get("kept", {}).items()},
                                     "calls": dict(c.get("calls", {}))}
            for path, n in c.get("calls", {}).items():
                o["calls"][path] = o["calls"].get(path, 0) + n
            if not o["installed_layers"] and not o["kept_layers"] and (c.get("installed") or c.get("kept")):
                o["installed_layers"] = list(c.get("installed", []))
                o["kept_layers"] = {r: list(v) for r, v in c.get("kept", {}).items()}
                o["installed"] = len(o["installed_layers"])
                o["kept"] = {r: len(v) for r, v in o["kept_layers"].items()}
                o["layers_from"] = name
    return ops


def write_section(path: str, section: dict) -> None:
    """Merge this process's section into the status file (locked read-modify-write, atomic replace)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)

    with fileio.locked(p):  # the writers' one advisory lock
        try:
            data = json.loads(fileio.read_text(p, "status file")) if p.exists() else {}
        except (OSError, ValueError, fileio.FileError):  # a FIFO here is refused, not read (it would block)
            data = {}
        if not isinstance(data, dict) or not isinstance(data.get("processes", {}), dict) \
                or data.get("hash") not in (None, section["hash"]) \
                or data.get("server") not in (None, section.get("server")):
            data = {}  # a previous launch's file, or not a status file at all: replaced
        data.update({"schema": SCHEMA, "profile": section["profile"], "hash": section["hash"],
                     "tp": section["tp"], "model": section["model"], "server": section.get("server")})
        procs = data.setdefault("processes", {})
        procs[section["process"]["name"]] = section
        fileio.atomic_write(p, json.dumps(data, indent=1, sort_keys=True), "status file")  # OSError on failure


def counters_path(path: str, process: str) -> Path:
    p = Path(path)
    return p.with_name(f"{p.name}.{process}.counters.json")


def write_counters(path: str, process: str, snap: dict) -> None:
    """One process's counters (:func:`snapshot`) in its own file (atomic replace, no lock: one writer)."""
    fileio.atomic_write(counters_path(path, process), json.dumps({"time": time.time(), "counters": snap},
                                                                 separators=(",", ":")), "counters file")


def cluster_path(path: str) -> Path:
    p = Path(path)
    return p.with_name(f"{p.name}.cluster.json")


def write_cluster(path: str, live: dict) -> None:
    """Rank 0: every rank's live figures (:meth:`r9k.plugin.agree.LivePublisher.collect`) beside the status file."""
    fileio.atomic_write(cluster_path(path), json.dumps(live, separators=(",", ":"), sort_keys=True), "cluster file")


def _read_cluster(path: Optional[str]) -> Optional[dict]:
    if not path:
        return None
    try:
        data = json.loads(fileio.read_text(cluster_path(path), "cluster file"))
    except (OSError, ValueError, fileio.FileError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("ranks"), dict) else None


def _with_counter_files(procs: dict, path: Optional[str]) -> dict:
    if not path:
        return procs
    out = {}
    for name, sec in procs.items():
        try:
            data = json.loads(counters_path(path, name).read_text())
        except (OSError, ValueError):
            out[name] = sec
            continue
        if data.get("time", 0) >= sec.get("time", 0):
            sec = dict(sec, counters=data.get("counters", {}), time=data["time"])
        out[name] = sec
    return out


def read_status_file(path: str) -> dict:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("processes", {}), dict):
        raise ValueError(f"{path}: not a status file")
    return data


def file_sections(path: Optional[str]) -> tuple[dict, dict]:
    """(the status file's data, its process sections with their counter files'), both ``{}`` when unreadable."""
    try:
        file_data = read_status_file(path) if path else {}
    except (OSError, ValueError):
        file_data = {}
    return file_data, _with_counter_files(dict(file_data.get("processes", {})), path)


def merged_status(own: Optional[dict], path: Optional[str]) -> dict:
    """What the route answers: the API server's section, the file's processes, the implementation in use as
    rank 0's worker reports it."""
    data: dict = {"schema": SCHEMA}
    file_data, procs = file_sections(path)
    if own is None and procs:  # read from the file alone: the front-end process speaks for the server
        own = procs.get("MainProcess") or next(iter(procs.values()))
    if own is not None:
        data.update({k: own[k] for k in ("profile", "hash", "tp", "model", "platform", "origin", "strict",
                                          "values", "non_stock")})
        procs.setdefault(own["process"]["name"], own)
    else:
        data.update({k: file_data.get(k) for k in ("profile", "hash", "tp", "model")})
    data["processes"] = {n: {"pid": s["process"]["pid"], "role": s["process"]["role"],
                             "rank": s["process"]["rank"], "hash": s["hash"], "in_use": s.get("in_use", {}),
                             "time": s.get("time"), "code": codeid.combined(s.get("code") or {}),
                             "code_as_on_disk": all(c.get("as_on_disk") for c in (s.get("code") or {}).values())}
                         for n, s in sorted(procs.items())}
    # rank 0 first: its layer list speaks for the model (every rank builds the same layers, sharded)
    ordered = sorted(procs.values(), key=lambda s: (s["process"]["role"] != "worker", s["process"]["rank"],
                                                   s["process"]["name"]))
    data["ops"] = merge_ops(ordered)
    front = procs.get("MainProcess") or own
    data["applied"] = (front or {}).get("applied")
    data["plan"] = (front or {}).get("plan")
    workers = sorted((s for s in procs.values() if s["process"]["role"] == "worker"),
                     key=lambda s: s["process"]["rank"])
    builder = workers[0] if workers else (own or next(iter(procs.values()), None))
    data["in_use"] = builder.get("in_use", {}) if builder else {}
    if builder is not None and builder["process"]["role"] == "worker" and builder.get("plan"):
        data["plan"] = builder["plan"]  # the model-building worker's: a kernel its self-check refused is a fallback
    data["in_use_from"] = builder["process"]["name"] if builder else None
    _mark_superseded(data, (front or builder or {}).get("op_variants") or {})
    data["agree"] = len({s["hash"] for s in procs.values()}) <= 1
    data["kv_cache"] = next((s.get("kv_cache") for s in ([own] if own else []) + list(procs.values())
                             if s.get("kv_cache")), None)
    data["vllm_choices"] = next((s.get("vllm_choices") for s in ordered if s.get("vllm_choices")), None)
    data["status_file"] = path
    data["server"] = (own or {}).get("server") or file_data.get("server")
    data["liveness"] = liveness(procs)
    data["cluster"] = cluster(procs, data.get("tp"), _read_cluster(path))
    return data


def liveness(procs: dict) -> dict:
    """Process names of the sections by ``"alive"``, ``"dead"`` (pid and start time) or ``"elsewhere"``
    (another node's, not checked)."""
    here = socket.gethostname()
    out: dict = {"alive": [], "dead": [], "elsewhere": []}
    for name, sec in sorted(procs.items()):
        p = sec.get("process", {})
        if p.get("node") not in (None, "", here):
            out["elsewhere"].append(name)
        elif process_alive(p.get("pid"), p.get("started")):
            out["alive"].append(name)
        else:
            out["dead"].append(name)
    return out


def cluster(procs: dict, tp: Optional[int], live: Optional[dict] = None, now: Optional[float] = None) -> dict:
    """Every rank of the server per node: its set, plan, counters and the age of its figures.

    Sources, the freshest winning per rank: the ranks' agreement records (no counters), this node's worker
    sections, and ``live``, rank 0's cluster file (stamped with the head's clock). ``calls``: summed over the
    ranks; ``not_reported``: expected ranks (agreed world, else TP) without figures; ``stale``: figures older
    than :data:`r9k.plugin.agree.STALE_AFTER_S`."""
    now = time.time() if now is None else now
    nodes: dict = {}
    world = None
    for sec in procs.values():
        for rec in sec.get("ranks") or []:
            world = max(world or 0, len(sec["ranks"]))
            nodes.setdefault(rec["node"], {})[str(rec["rank"])] = {
                "pid": rec["pid"], "process": rec.get("process"), "hash": rec["hash"], "in_use": rec.get("in_use", {}),
                "modes": rec.get("modes", {}), "counters": None, "time": None, "source": "agreement"}
    where = {rank: node for node, ranks in nodes.items() for rank in ranks}

    def put(node: str, rank: str, entry: dict) -> None:
        old_node = where.get(rank)
        old = nodes.get(old_node, {}).get(rank) if old_node is not None else None
        if old is not None and old.get("time") is not None and (entry.get("time") or 0) < old["time"]:
            return  # older figures than those already here
        if old is not None and old_node != node:
            del nodes[old_node][rank]
        merged = dict(old or {}, **{k: v for k, v in entry.items() if v is not None or k == "counters"})
        nodes.setdefault(node, {})[rank] = merged
        where[rank] = node

    for name, sec in procs.items():
        p = sec.get("process", {})
        if p.get("role") != "worker":
            continue
        rank = str(p.get("rank", 0))
        known = nodes.get(where.get(rank, ""), {}).get(rank)
        if known is not None and known.get("pid") not in (None, p.get("pid")):
            continue  # another process than the one that agreed as this rank
        # a running process of this node writes its counters within a second of a change: its figures are current
        alive = p.get("node") in (None, "", socket.gethostname()) and process_alive(p.get("pid"), p.get("started"))
        put(p.get("node") or where.get(rank) or "?", rank, {
            "pid": p.get("pid"), "process": name, "hash": sec.get("hash"), "in_use": sec.get("in_use", {}),
            "counters": sec.get("counters"), "time": now if alive else sec.get("time"), "source": "local"})
    if live:
        world = max(world or 0, int(live.get("world_size") or 0))
        for rank, rec in (live.get("ranks") or {}).items():
            put(rec["node"], str(rank), {"pid": rec.get("pid"), "process": rec.get("process"), "hash": rec.get("hash"),
                                         "in_use": rec.get("in_use"), "modes": rec.get("modes"),
                                         "counters": rec.get("counters"), "time": rec.get("received", rec.get("time")),
                                         "source": "live"})
    ages: dict = {}
    calls: dict = {}
    for node, ranks in nodes.items():
        for rank, e in ranks.items():
            e["age_s"] = round(max(0.0, now - e["time"]), 1) if e.get("time") is not None else None
            if e["age_s"] is not None:
                ages[node] = max(ages.get(node, 0.0), e["age_s"])
            for op, c in (e.get("counters") or {}).items():
                for path, n in (c.get("calls") or {}).items():
                    calls.setdefault(op, {})[path] = calls.setdefault(op, {}).get(path, 0) + n
    expected = world or tp or 0
    reported = {int(r) for ranks in nodes.values() for r, e in ranks.items() if e.get("counters") is not None}
    stale = sorted(int(r) for ranks in nodes.values() for r, e in ranks.items()
                   if e.get("age_s") is not None and e["age_s"] > STALE_AFTER_S)
    return {"nodes": nodes, "world_size": expected, "age_s": ages, "calls": calls,
            "not_reported": sorted(set(range(expected)) - reported), "stale": stale,
            "collected": (live or {}).get("collected")}


def clean_dead(run_dir: Path, keep: Optional[str] = None) -> list[str]:
    """Remove the status files (with their counter, lock, claim and hand-on files) of servers whose processes
    are all gone on this node; returns the files removed."""
    removed = []
    for f in sorted(Path(run_dir).glob("server-*.status.json")):
        if keep and str(f) == str(keep):
            continue
        try:
            data = read_status_file(str(f))
        except (OSError, ValueError):
            continue
        live = liveness(data.get("processes", {}))
        if live["alive"] or live["elsewhere"] or not live["dead"]:
            continue
        pids = {sec.get("process", {}).get("pid") for sec in data.get("processes", {}).values()}
        handed = [m for pid in pids if pid for m in f.parent.glob(f"manifest-*-{pid}.json")]  # startup.hand_on's
        for g in [f, f.with_name(f.name + ".lock"), f.with_name(f.name.replace(".status.json", ".claim")),
                  *f.parent.glob(f.name + ".*.counters.json"), cluster_path(str(f)), *handed]:
            try:
                g.unlink()
                removed.append(str(g))
            except OSError:
                pass
    return removed


def _mark_superseded(data: dict, op_variants: dict) -> None:
    """A superseded variant (:func:`superseded`) is said so in ``in_use`` and not counted installed in ``plan``."""
    sup = superseded(data.get("ops") or {}, op_variants)
    data["superseded"] = sup
    if not sup:
        return
    data["in_use"] = dict(data.get("in_use") or {}, **sup)
    if data.get("plan"):
        plan = dict(data["plan"])
        plan["installed"] = max(0, plan.get("installed", 0) - len(sup))
        plan["superseded"] = len(sup)
        data["plan"] = plan


#: What the route answers (HTTP 503) when the API server has no set: the plugin is inactive in it.
NO_SET = ("the r9k plugin runs no set in this server's API process: vLLM got no r9k block in its additional_config "
          f"(--additional-config, or a --config file's additional-config) and no {envvars.PROFILE.name} or "
          f"{envvars.MANIFEST.name}; start it with r9kctl launch, its --dry-run or its --format vllm-config files")


def authorized(request) -> bool:
    """Whether ``request`` may read the status: vLLM's ``AuthenticationMiddleware`` (which guards only ``/v1``...)
    is asked; a key set without that middleware found answers 401 rather than leave the route open."""
    app = request.app
    for m in getattr(app, "user_middleware", []):
        if getattr(m.cls, "__name__", "") == "AuthenticationMiddleware" and hasattr(m.cls, "verify_token"):
            return bool(m.cls(None, *m.args, **m.kwargs).verify_token(request.headers))
    args = getattr(app.state, "args", None)
    return not (getattr(args, "api_key", None) or os.environ.get("VLLM_API_KEY"))


def _local(request) -> bool:
    host = getattr(request.client, "host", "") or ""
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


PATH_SHOWN = "<a path: ask from this machine with ?paths=1>"


def public(data):
    """The answer with credential-named values (keys, ``--api-key K``) masked and absolute paths replaced;
    ``GET /r9k/status?paths=1`` from this machine answers them as they are."""
    def secret_option(x) -> bool:
        return isinstance(x, str) and x.startswith("--") and is_secret(x[2:].split("=")[0].replace("-", "_"))

    def walk(v):
        if isinstance(v, dict):
            return {k: (MASK if is_secret(str(k).replace("-", "_")) and isinstance(x, str) and x else walk(x))
                    for k, x in v.items() if k != "status_file"}
        if isinstance(v, list):
            out, hide = [], False
            for x in v:
                out.append(MASK if hide and isinstance(x, str) else walk(x))
                hide = secret_option(x) and "=" not in x
            return out
        if secret_option(v) and "=" in v:
            return v.split("=")[0] + "=" + MASK
        if isinstance(v, str) and (v.startswith(("/", "~/")) or "=/" in v):
            return PATH_SHOWN
        return v

    return walk(data)


class StatusEndpoint:
    """A ``vllm.endpoint_plugins`` entry: ``GET /r9k/status`` answers the active set as JSON."""

    name = "r9k"
    required_tasks = None

    def attach_router(self, app) -> None:
        from fastapi import Request
        from fastapi.responses import JSONResponse

        async def r9k_status(request: Request):
            if not authorized(request):
                return JSONResponse({"error": "Unauthorized"}, status_code=401)  # vLLM's own answer
            data = current_status()
            if not data.get("hash"):  # no set in this server: say so, never an empty 200
                return JSONResponse({"error": NO_SET}, status_code=503)
            if not (request.query_params.get("paths") == "1" and _local(request)):
                data = public(data)
            return JSONResponse(data)

        r9k_status.__annotations__["request"] = Request  # a real class, not this module's postponed string

        app.add_api_route(ROUTE, r9k_status, methods=["GET"], name="r9k_status")

    async def init_state(self, engine_client, state, args) -> None:
        """Once the engine client exists (its ``vllm_config`` final): :func:`check_applied`, the KV comparison."""
        cfg = getattr(engine_client, "vllm_config", None)
        if cfg is None:
            return None

        check_applied(cfg, args)  # args: the API server's own (--chat-template is not in vllm_config)
        try:  # the engine is up: vLLM's KV-cache allocation is known here (predicted vs allocated)
            on_engine_ready(engine_client)
        except Exception:  # noqa: BLE001  (informative; never stop the server for it)
            pass
        return None


def endpoint_plugin() -> StatusEndpoint:
    """Factory named by the ``vllm.endpoint_plugins`` entry point."""
    return StatusEndpoint()


# --- the log's tables, the flusher ---------------------------------------------------------------------------

def startup_table(active, table, proc) -> list[str]:
    """The startup table: a header with profile and hash; rank 0 lists every non-stock variant."""
    rs = active.rs
    head = (f"r9k {rs.hash}: profile {rs.profile} (tp {rs.tp}, {active.origin}), {proc.label}, "
            f"server {active.server or '?'}"
            f"{' strict' if rs.strict else ''}")
    if proc.rank != 0:
        return [head + f"; rank {proc.rank}: table on rank 0"]
    rows = []
    # every variant not at stock, and those this plugin could install here (a launch at stock says them too)
    shown = [r for r in rs.items.values()
             if not r.is_stock or table.plans.get(r.variant.id) and table.plans[r.variant.id].pluggable]
    gates = gate_labels(active)
    sup = superseded({}, table.by_op, {vid: d.state for vid, d in table.plans.items()})
    for r in sorted(shown, key=lambda r: r.variant.knob):
        d = table.plans.get(r.variant.id)
        rows.append((r.variant.knob, "(unset)" if r.value is None else r.value, f"{r.layer}: {r.source}",
                     (sup.get(r.variant.id) or (d.describe() if d else "?"))
                     + (f"; gate {gates[r.variant.id]}" if r.variant.id in gates else "")))
    n = len(rs.non_stock())
    c = plan_counts(table)
    lines = [head + f"; {n} variant(s) not at stock: {c['installed'] - len(sup)} installed"
             f"{f', {len(sup)} superseded' if sup else ''}, {c['fallback']} "
             f"fall back to vLLM's path, {c['env_only']} env-only (read by code outside this project)"]
    if rows:
        w = [max(len(x[i]) for x in rows + [("KNOB", "VALUE", "FROM", "")]) for i in range(3)]
        lines.append(f"r9k {rs.hash}:   {'KNOB':<{w[0]}}  {'VALUE':<{w[1]}}  {'FROM':<{w[2]}}  IMPLEMENTATION")
        for k, v, src, impl in rows:
            lines.append(f"r9k {rs.hash}:   {k:<{w[0]}}  {v:<{w[1]}}  {src:<{w[2]}}  {impl}")
    return lines


def layers_table(active, snap: dict, proc) -> list[str]:
    """Per op: layer instances running this project's kernel, layers that kept vLLM's path and why."""
    head = f"r9k {active.hash}: model built ({proc.label})"
    if proc.rank != 0:
        n = sum(len(c["installed"]) for c in snap.values())
        return [head + f"; rank {proc.rank}: {n} layer(s) run r9k kernels; table on rank 0"]
    lines = [head + ": per op, layers running r9k's kernel / keeping vLLM's path:"]
    for op, c in sorted(snap.items()):
        kept = "; ".join(f"{len(v)} {r}" for r, v in sorted(c["kept"].items())) or "none"
        first = ", ".join(c["installed"][:3]) + (", ..." if len(c["installed"]) > 3 else "")
        lines.append(f"r9k {active.hash}:   {op}: {len(c['installed'])} run r9k ({first or '-'}); kept vLLM's: {kept}")
    from . import selfcheck

    if selfcheck.SPENT:
        lines.append(f"r9k {active.hash}: {selfcheck.summary()}")
    table = dispatch.get_table()
    for line in superseded(snap, table.by_op if table is not None else {}).values():
        lines.append(f"r9k {active.hash}:   {line}")
    return lines


class _Flusher:
    """A daemon thread that writes this process's counters (:func:`write_counters`) when they changed, at most
    once per interval, and logs the per-op layer table once the model's layers are stable ("model built")."""

    def __init__(self, interval: float = FLUSH_INTERVAL_S):
        import threading

        self.interval = interval
        self.last: Optional[dict] = None
        self.layers_logged = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="r9k-status-flush", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                snap = snapshot()
                self.look(snap, dispatch.get_table())
                share_live(snap, dispatch.get_table())
            except Exception as exc:  # noqa: BLE001 - the status is informative; never kill the worker
                logger.debug("r9k: status flush failed: %s", exc)

    def look(self, snap: dict, table) -> None:
        if snap == self.last:
            if snap and not self.layers_logged and any(c["installed"] or c["kept"] for c in snap.values()):
                self.layers_logged = True  # stable for one interval: the model is built
                for line in layers_table(_active, snap, _proc):
                    emit(logging.INFO, line)
            return
        self.last = snap
        if _proc is None or _status_path is None:
            return
        try:  # this process's counters into its own small file beside the status file (no lock: one writer)
            write_counters(_status_path, _proc.name, snap)
        except OSError as exc:
            logger.debug("r9k: cannot write the counters file: %s", exc)


def start_flusher() -> None:
    global _flusher
    if _flusher is None:
        _flusher = _Flusher()
        _flusher.thread.start()


def share_live(snap: dict, table) -> None:
    """Once the ranks agreed: publish this rank's live figures; rank 0 collects them into the cluster file."""
    if _live is None:
        return
    pub, record = _live
    if pub.world_size < 2:
        return
    pub.publish(lambda: agree.live_record(record, snap, table), snap)
    if pub.rank == 0 and _status_path:
        got = pub.collect()
        if got is not None:
            write_cluster(_status_path, got)
