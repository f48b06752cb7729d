"""The server's active set, for clients: a status file, and the HTTP route ``GET /r9k/status``.

The status file (named by ``envvars.STATUS_FILE``; by default next to the manifest of ``r9kctl launch``) is
written by every plugin process into its own section (keyed by process name), atomically: the API
server writes what it resolved at start, the worker of rank 0 rewrites it when the model is built,
with the implementation each fused op actually got.

The route is a ``vllm.endpoint_plugins`` entry (vLLM loads endpoint plugins only when named in
``VLLM_PLUGINS``; ``r9kctl launch`` sets ``VLLM_PLUGINS=r9k``). It answers the API server's own
resolved set, merged with the file's per-process sections.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Optional

SCHEMA = "r9k-status/1"
ROUTE = "/r9k/status"


def snapshot(active, table, proc, applied: Optional[dict] = None) -> dict:
    """This process's view: profile, hash, every value, the non-stock variants with provenance, the
    adapters' per-layer and per-call counters (:mod:`r9k.plugin.counters`) and, in the API server, what
    vLLM applied of the launcher's requests (:mod:`r9k.plugin.applied`)."""
    from . import counters

    rs = active.rs
    plans = table.plans if table is not None else {}
    non_stock = []
    for r in sorted(rs.non_stock(), key=lambda r: r.variant.knob):
        p = plans.get(r.variant.id)
        non_stock.append({"variant": r.variant.id, "knob": r.variant.knob, "value": r.value,
                          "stock": r.variant.stock, "layer": r.layer, "source": r.source,
                          "implementation": p.describe() if p else None,
                          "mode": p.mode if p else None})
    return {
        "profile": rs.profile, "hash": rs.hash, "tp": rs.tp, "model": rs.model, "platform": rs.platform,
        "origin": active.origin, "strict": rs.strict,
        "process": {"name": proc.name, "pid": proc.pid, "role": proc.role, "rank": proc.rank},
        "values": {r.variant.knob: r.value for r in rs.items.values() if r.value is not None},
        "non_stock": non_stock,
        "in_use": table.in_use() if table is not None else {},
        "plan": plan_counts(table),
        "counters": counters.snapshot(),
        "applied": applied,
        "kv_cache": _kv_cache(),  # predicted vs allocated, once the engine is ready (plugin/kvcache.py)
        "vllm_choices": _vllm_choices(),  # vLLM's kernel choices per layer, once the model is built here
        "time": time.time(),
    }


def _kv_cache():
    from . import kvcache

    return kvcache.current()


def _vllm_choices():
    from . import vllm_choices

    return vllm_choices.current()


def plan_counts(table) -> dict:
    """The availability counts of this process's plan (``r9kctl validate`` prints the same numbers)."""
    plans = table.plans.values() if table is not None else []
    modes = [p.mode for p in plans]
    return {"installed": modes.count("fused"), "fallback": modes.count("fallback"), "env_only": modes.count("env"),
            "fallbacks": {p.knob: p.reason for p in plans if p.mode == "fallback"}}


def merge_ops(sections: list[dict]) -> dict:
    """Per op over the processes: layers running this project's kernel / keeping vLLM's path (as the
    model-building process of rank 0 reports them, and per process), calls summed over the processes."""
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
    lock = p.with_name(p.name + ".lock")
    with open(lock, "a+") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        try:
            data = json.loads(p.read_text()) if p.exists() else {}
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict) or not isinstance(data.get("processes", {}), dict) \
                or data.get("hash") not in (None, section["hash"]):
            data = {}  # a previous launch's file, or not a status file at all: replaced
        data.update({"schema": SCHEMA, "profile": section["profile"], "hash": section["hash"],
                     "tp": section["tp"], "model": section["model"]})
        procs = data.setdefault("processes", {})
        procs[section["process"]["name"]] = section
        from r9k.registry import fileio

        fileio.atomic_write(p, json.dumps(data, indent=1, sort_keys=True), "status file")  # OSError on failure


def counters_path(path: str, process: str) -> Path:
    p = Path(path)
    return p.with_name(f"{p.name}.{process}.counters.json")


def write_counters(path: str, process: str, snap: dict) -> None:
    """One process's counters (:func:`r9k.plugin.counters.snapshot`) in its own file: compact JSON,
    atomic replace, no lock (one writer per file). Merged into its section by :func:`merged_status`."""
    target = counters_path(path, process)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"time": time.time(), "counters": snap}, separators=(",", ":")))
    os.replace(tmp, target)


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


def merged_status(own: Optional[dict], path: Optional[str]) -> dict:
    """What the route answers: the API server's section, the file's processes, and the implementation
    in use as the model-building worker (rank 0) reports it."""
    data: dict = {"schema": SCHEMA}
    file_data = {}
    if path:
        try:
            file_data = read_status_file(path)
        except (OSError, ValueError):
            file_data = {}
    procs = _with_counter_files(dict(file_data.get("processes", {})), path)
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
                             "time": s.get("time")}
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
    data["in_use_from"] = builder["process"]["name"] if builder else None
    data["agree"] = len({s["hash"] for s in procs.values()}) <= 1
    data["kv_cache"] = next((s.get("kv_cache") for s in ([own] if own else []) + list(procs.values())
                             if s.get("kv_cache")), None)
    data["vllm_choices"] = next((s.get("vllm_choices") for s in ordered if s.get("vllm_choices")), None)
    data["status_file"] = path
    return data


class StatusEndpoint:
    """A ``vllm.endpoint_plugins`` entry: ``GET /r9k/status`` answers the active set as JSON."""

    name = "r9k"
    required_tasks = None

    def attach_router(self, app) -> None:
        from fastapi.responses import JSONResponse

        async def r9k_status():
            from . import current_status

            return JSONResponse(current_status())

        app.add_api_route(ROUTE, r9k_status, methods=["GET"], name="r9k_status")

    async def init_state(self, engine_client, state, args) -> None:
        """vLLM calls this in the API server once the engine client exists: its ``vllm_config`` is final,
        so the launch's requests are compared with what vLLM applied here (:func:`r9k.plugin.check_applied`)."""
        cfg = getattr(engine_client, "vllm_config", None)
        if cfg is None:
            return None
        from . import check_applied, kvcache

        check_applied(cfg, args)  # args: the API server's own (--chat-template is not in vllm_config)
        try:  # the engine is up: vLLM's KV-cache allocation is known here (predicted vs allocated)
            kvcache.on_engine_ready(engine_client)
        except Exception:  # noqa: BLE001  (informative; never stop the server for it)
            pass
        return None


def endpoint_plugin() -> StatusEndpoint:
    """Factory named by the ``vllm.endpoint_plugins`` entry point."""
    return StatusEndpoint()
