"""The server's active set, for clients: a status file, and the HTTP route ``GET /r9k/status``.

The status file (named by ``envvars.STATUS_FILE``; by default the server instance's own file,
``<cache>/run/server-<id>.status.json``, keyed by the instance id ``r9kctl launch`` creates: two servers of
one profile never share one) is written by every plugin process into its own section (keyed by process
name, with its pid and start time), atomically: the API server writes what it loaded at start, the worker
of rank 0 rewrites it when the model is built, with the implementation each fused op actually got, and
with every rank's record (node, rank, pid, set, plan) gathered when the ranks agreed
(:func:`r9k.plugin.agree.agree`). Rank 0 also keeps, beside it, the cluster file: every rank's live table and
counters, on every node, as the ranks share them through the world's rendezvous store
(:class:`r9k.plugin.agree.LivePublisher`); :func:`cluster` merges them per node and rank, with their age.

A status file whose processes are all gone (pid not running, or running with another start time: a
reused pid) is a dead server's: :func:`liveness` says so, ``r9kctl status --file`` exits non-zero, and the
next server's first process removes it (:func:`clean_dead`).

The route is a ``vllm.endpoint_plugins`` entry (vLLM loads endpoint plugins only when named in
``VLLM_PLUGINS``; ``r9kctl launch`` sets ``VLLM_PLUGINS=r9k``). It answers the API server's own
resolved set, merged with the file's per-process sections.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional
from ..registry import envvars
from . import check_applied, counters, current_status, kvcache
from .models import SUPERSEDED, SUPERSEDED_BY
from ..registry.manifest import Impl
from ..registry import fileio
from .startup import process_alive
from . import codeid, vllm_choices
from .agree import STALE_AFTER_S
from ..registry.redact import is_secret, MASK

SCHEMA = "r9k-status/1"
ROUTE = "/r9k/status"


def snapshot(active, table, proc, applied: Optional[dict] = None, ranks: Optional[list] = None) -> dict:
    """This process's view: profile, hash, every value, the non-stock variants with provenance, the
    adapters' per-layer and per-call counters (:mod:`r9k.plugin.counters`) and, in the API server, what
    vLLM applied of the launcher's requests (:mod:`r9k.plugin.applied`)."""
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
        "origin": active.origin, "strict": rs.strict, "server": active.server,
        "process": {"name": proc.name, "pid": proc.pid, "role": proc.role, "rank": proc.rank,
                    "node": proc.node, "started": proc.started},
        "values": {r.variant.knob: r.value for r in rs.items.values() if r.value is not None},
        "non_stock": non_stock,
        "in_use": table.in_use() if table is not None else {},
        "plan": plan_counts(table),
        "op_variants": dict(table.by_op) if table is not None else {},
        "counters": counters.snapshot(),
        "code": codeid.snapshot(table),  # the kernels' source identity as loaded (plugin/codeid.py)
        "applied": applied,
        "kv_cache": _kv_cache(),  # predicted vs allocated, once the engine is ready (plugin/kvcache.py)
        "ranks": ranks,  # every rank's record, where this process took part in the ranks' agreement
        "vllm_choices": _vllm_choices(),  # vLLM's kernel choices per layer, once the model is built here
        "time": time.time(),
    }


def superseded(ops: dict, op_variants: dict, plans: Optional[dict] = None) -> dict[str, str]:
    """variant id -> ``"<variant>: superseded by <op> in N layers"`` for each variant whose op is switched on but
    takes second place to another in the layers that would run it (``r9k.plugin.models.SUPERSEDED_BY``; the
    layers record it as kept with reason ``superseded by <op>``). ``ops``: per op, ``kept`` as {reason: layer
    names or a count} (a process's counters or the merged ops). Before the model is built (no layer recorded),
    ``plans`` (variant id -> mode) gives the same verdict without a count: both variants installed."""
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


def _kv_cache():
    return kvcache.current()


def _vllm_choices():
    return vllm_choices.current()


def plan_counts(table) -> dict:
    """The availability counts of this process's plan (``r9kctl validate`` prints the same numbers)."""
    plans = table.plans.values() if table is not None else []

    modes = [p.mode for p in plans]
    return {"installed": modes.count(Impl.FUSED), "fallback": modes.count(Impl.FALLBACK),
            "env_only": modes.count(Impl.ENV),
            "fallbacks": {p.knob: p.reason for p in plans if p.mode is Impl.FALLBACK}}


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
    """One process's counters (:func:`r9k.plugin.counters.snapshot`) in its own file: compact JSON,
    atomic replace, no lock (one writer per file). Merged into its section by :func:`merged_status`."""
    fileio.atomic_write(counters_path(path, process), json.dumps({"time": time.time(), "counters": snap},
                                                                 separators=(",", ":")), "counters file")


def cluster_path(path: str) -> Path:
    p = Path(path)
    return p.with_name(f"{p.name}.cluster.json")


def write_cluster(path: str, live: dict) -> None:
    """Rank 0: every rank's live figures (:meth:`r9k.plugin.agree.LivePublisher.collect`) beside the status
    file (atomic replace, one writer). Merged by :func:`merged_status`."""
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
    """Which processes of the sections still run (pid and start time, on this node): ``{"alive": [...],
    "dead": [...], "elsewhere": [...]}`` (process names; "elsewhere": another node's, not checked here)."""
    import socket

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
    """Every rank of the server per node: its set, plan, table and counters, and how old its figures are.

    Sources, the freshest winning per rank: the records the ranks exchanged when they agreed (who and which set;
    no counters), the worker sections of this node (their counter files), and ``live``, the cluster file rank 0
    keeps from every rank's shared figures (:class:`r9k.plugin.agree.LivePublisher`; each stamped ``received``
    with the head's clock; a running local worker's own section counts as current). Per rank ``age_s``
    (seconds since the head got its figures), per node ``age_s`` (its oldest rank's); ``calls``: per op and
    path, summed over every rank's figures; ``not_reported``: the ranks expected (the agreed world, else the TP
    size) with no figures at all; ``stale``: ranks whose figures are older than
    :data:`r9k.plugin.agree.STALE_AFTER_S` (a running rank refreshes them more often)."""
    import socket

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
    """Remove the status files (and their counter files and lock) of servers whose processes are all gone
    on this node; returns the files removed. A file of another node's server, or unreadable, is left."""
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
        for g in [f, f.with_name(f.name + ".lock"), f.with_name(f.name.replace(".status.json", ".claim")), *f.parent.glob(f.name + ".*.counters.json"), cluster_path(str(f)),
                  *handed]:
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
    """Whether ``request`` may read the status: under the key that guards vLLM's own API. vLLM applies
    ``--api-key`` / ``VLLM_API_KEY`` as its ``AuthenticationMiddleware``, which guards only its own paths
    (``/v1``...); the route asks that very middleware (the keys it holds, its check). A server with a key
    set but no such middleware found (another vLLM) answers 401 rather than leave the route open."""
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
    """The answer without file paths or secrets: a credential-named key's value and the value after a
    credential-named option (``--api-key K``) masked, any absolute path replaced (the status file, a
    model folder, a manifest). ``GET /r9k/status?paths=1`` from this machine answers them as they are."""
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
        """vLLM calls this in the API server once the engine client exists: its ``vllm_config`` is final,
        so the launch's requests are compared with what vLLM applied here (:func:`r9k.plugin.check_applied`)."""
        cfg = getattr(engine_client, "vllm_config", None)
        if cfg is None:
            return None

        check_applied(cfg, args)  # args: the API server's own (--chat-template is not in vllm_config)
        try:  # the engine is up: vLLM's KV-cache allocation is known here (predicted vs allocated)
            kvcache.on_engine_ready(engine_client)
        except Exception:  # noqa: BLE001  (informative; never stop the server for it)
            pass
        return None


def endpoint_plugin() -> StatusEndpoint:
    """Factory named by the ``vllm.endpoint_plugins`` entry point."""
    return StatusEndpoint()
