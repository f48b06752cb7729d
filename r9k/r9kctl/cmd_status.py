"""``r9kctl status``: the active set of a running server, as the server reports it.

Reads ``GET <url>/r9k/status`` (the plugin's route) with ``--url``, or the plugin's status file with
``--file`` (default: the file ``envvars.STATUS_FILE`` names). Shows the profile, the hash each vLLM
process resolved, and for every variant not at its stock value: knob, value, provenance and the
implementation in use.

Each server writes its own file (keyed by the server instance id ``r9kctl launch`` creates); the file of a
server whose processes are all gone (pid not running, or reused by another process) is reported dead.
A server started with ``--api-key`` / ``VLLM_API_KEY`` guards the route with that key: ``--url`` sends
``VLLM_API_KEY`` from this environment.
The cluster view lists every rank per node (as the ranks told each other when they agreed) and the ranks
that have not reported.

Exit codes: 0 the processes agree, 1 they report different hashes, 2 no status could be read, 3 the file is a
dead server's.
"""
from __future__ import annotations

import json
import os
import sys
from urllib.parse import urlsplit

from ..registry import envvars, fileio
from ..registry.redact import escape, mask

from . import netclient
from .output import table

ROUTE = "/r9k/status"  # same as r9k.plugin.report.ROUTE (not imported: keep this command light)


def add_parser(sub) -> None:
    p = sub.add_parser("status", help="show the active set a running server reports",
                       description=__doc__.split("\n\n")[1])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000")
    src.add_argument("--file", help=f"status file written by the plugin (default: ${envvars.STATUS_FILE.name})")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the server (default 10)")
    p.set_defaults(func=run)


def fetch(url: str, timeout: float = 10.0) -> dict:
    full = url.rstrip("/") + ROUTE
    host = urlsplit(full).hostname or ""
    if host in ("localhost", "::1") or host.startswith("127."):
        full += "?paths=1"  # a server on this machine answers its file paths (the status file) to this machine
    key = os.environ.get("VLLM_API_KEY")  # a server started with it (or --api-key) guards the route with it
    data = netclient.get_json(full, timeout_s=timeout, headers={"Authorization": f"Bearer {key}"} if key else None,
                              expect=(dict, list, str, int, float, bool, type(None)))
    if not isinstance(data, dict):
        raise ValueError(f"{full}: the answer is not a JSON object (is this an r9k server?)")
    problem = _shape_problem(data) if "in_use" not in data else None
    if problem is None and not data.get("hash"):
        problem = "it names no set (no profile, no hash): the server's r9k plugin is inactive"
    if problem:
        raise ValueError(f"{full}: not a usable status: {problem}")
    return data


def _shape_problem(data: dict) -> str | None:
    """What is wrong with a status file's structure (None when it is usable)."""
    procs = data.get("processes", {})
    if not isinstance(procs, dict):
        return "'processes' must be an object"
    for name, sec in procs.items():
        if not isinstance(sec, dict) or not isinstance(sec.get("process"), dict) or "hash" not in sec:
            return f"process section {name!r} must be an object with 'process' and 'hash'"
        if not all(k in sec["process"] for k in ("pid", "role", "rank")):
            return f"process section {name!r}: 'process' needs pid, role and rank"
    if not procs and "in_use" not in data:
        return "no process sections (not a status file written by the r9k plugin?)"
    return None


def read(args) -> dict:
    if args.url:
        return fetch(args.url, args.timeout)
    path = args.file or envvars.STATUS_FILE.get()
    if not path:
        raise ValueError(f"give --url or --file (or set {envvars.STATUS_FILE.name})")
    data = fileio.read_json(path, "status file", expect=dict)
    problem = _shape_problem(data)
    if problem:
        raise fileio.error(path, "status-file", f"not a usable status file: {problem}", 1, 1)
    if "in_use" not in data:  # the raw file: merge the processes' sections as the route does
        from ..plugin.api import merged_status

        data = merged_status(None, path)
    return data


def run(args) -> int:
    """:func:`_run`; a status of another shape than the plugin writes (a server or file answering something
    else) is one line and exit 2, not an internal error."""
    try:
        return _run(args)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        where = args.url or args.file or envvars.STATUS_FILE.get()
        print(f"r9kctl status: error[status]: {where}: the status has an unexpected shape "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2


def _err(line: str) -> None:
    """An error line: one line, whatever a URL or an answer holds (a CR LF in --url forges none)."""
    sys.stderr.write(escape(line) + "\n")


def _run(args) -> int:
    if args.timeout is not None and not args.timeout > 0:
        _err(f"r9kctl status: error[usage]: --timeout {args.timeout:g}: must be a positive number of seconds")
        return 2
    try:
        data = read(args)
    except netclient.ClientError as exc:
        if exc.kind == "http":
            hint = " (the server runs without the plugin's route: VLLM_PLUGINS must name r9k)" \
                if exc.status == 404 else ""
            if exc.status == 503 and '"error"' in (exc.body or ""):  # the route's own word: the server has no set
                try:
                    hint = f": {json.loads(exc.body)['error']}"
                except (ValueError, KeyError, TypeError):
                    pass
            _err(f"r9kctl status: error[http]: {args.url}{ROUTE}: HTTP {exc.status}{hint}")
        elif exc.kind == "connection":
            _err(f"r9kctl status: error[connection]: {exc} (is the server running?)")
        elif exc.kind == "timeout":
            _err(f"r9kctl status: error[connection]: {args.url}: no answer within {args.timeout:g} s")
        else:
            _err(f"r9kctl status: error[{exc.kind}]: {exc}")
        return 2
    except (OSError, ValueError) as exc:
        if isinstance(exc, TimeoutError) or "timed out" in str(exc):
            _err(f"r9kctl status: error[connection]: {args.url}: no answer within {args.timeout:g} s")
        else:
            _err(f"r9kctl status: error[status]: {' '.join(str(exc).split())}")
        return 2
    agree = data.get("agree", True)
    live = data.get("liveness") or {}
    dead = bool(args.file) and bool(live.get("dead")) and not live.get("alive") and not live.get("elsewhere")
    if dead:
        print(f"r9kctl status: error[dead-server]: {args.file}: server {data.get('server') or '?'} is not running "
              f"(its processes {', '.join(live['dead'])} are gone); the next launch removes its files", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
        return 3 if dead else 0 if agree else 1
    if dead:
        return 3
    print(f"profile {data.get('profile')}  hash {data.get('hash')}  tp {data.get('tp')}  model {data.get('model')}  "
          f"server {data.get('server')}")
    if data.get("kv_cache"):
        from ..plugin.api import kv_cache_line

        print(kv_cache_line(data["kv_cache"]))
    procs = data.get("processes", {})
    table(["PROCESS", "PID", "ROLE", "RANK", "HASH", "KERNEL CODE"],
          [[n, p.get("pid"), p.get("role"), p.get("rank"), p.get("hash"),
            "-" if not p.get("code") else p["code"] + ("" if p.get("code_as_on_disk", True) else " (not the files' text)")]
           for n, p in procs.items()],
          title="processes")
    cl = data.get("cluster") or {}
    if cl.get("nodes"):
        def _calls(r):
            c = r.get("counters")
            return "-" if c is None else ", ".join(f"{op} {p}={n}" for op, o in sorted(c.items())
                                                   for p, n in sorted((o.get("calls") or {}).items())) or "0"
        table(["NODE", "RANK", "PID", "HASH", "FUSED OPS", "CALLS (OP PATH=N)", "AGE"],
              [[node, rank, r.get("pid"), r.get("hash"), sum(1 for m in (r.get("modes") or {}).values() if m == "fused"),
                _calls(r), "-" if r.get("age_s") is None else f"{r['age_s']:g} s"]
               for node, ranks in sorted(cl["nodes"].items()) for rank, r in sorted(ranks.items(), key=lambda x: int(x[0]))],
              title=f"ranks per node (world {cl.get('world_size')}; figures' age per node: "
                    f"{', '.join(f'{n} {a:g} s' for n, a in sorted((cl.get('age_s') or {}).items())) or '-'})")
    if cl.get("not_reported"):
        print(f"ranks that have not reported: {', '.join(map(str, cl['not_reported']))}")
    if cl.get("stale"):
        print(f"ranks whose figures are stale (no word from them lately): {', '.join(map(str, cl['stale']))}")
    if live.get("dead"):
        print(f"processes gone: {', '.join(live['dead'])}")
    in_use = data.get("in_use", {})
    rows = [[r["knob"], mask(r["knob"], r["value"]), f"{r['layer']}: {r['source']}", in_use.get(r["variant"], r.get("implementation"))]
            for r in data.get("non_stock", [])]
    table(["KNOB", "VALUE", "FROM", "IMPLEMENTATION IN USE"], rows,
          title=f"not at stock (implementation as reported by {data.get('in_use_from')})")
    plan = data.get("plan") or {}
    if plan:
        print(f"kernels: {plan.get('installed', 0)} installed, "
              + (f"{plan['superseded']} superseded, " if plan.get("superseded") else "")
              + f"{plan.get('fallback', 0)} fall back to vLLM's path, "
              f"{plan.get('env_only', 0)} env-only (read by code outside this project)")
        for line in sorted((data.get("superseded") or {}).values()):
            print(f"  {line}")
        for knob, why in sorted((plan.get("fallbacks") or {}).items()):
            print(f"  falls back: {knob}: {why}")
    ops = data.get("ops") or {}
    op_rows = []
    for op, o in sorted(ops.items()):
        kept = "; ".join(f"{n} {r}" for r, n in sorted(o.get("kept", {}).items())) or "-"
        calls = ", ".join(f"{p}={n}" for p, n in sorted(o.get("calls", {}).items())) or "0"
        op_rows.append([op, o.get("installed", 0), kept, calls])
    table(["OP", "LAYERS ON R9K", "KEPT VLLM'S PATH (WHY)", "CALLS SINCE START (ALL PROCESSES)"], op_rows,
          title="per op: layer instances and calls (counters of the model-building processes)")
    applied = data.get("applied")
    if applied:
        table(["STATE", "KNOB", "REQUESTED", "APPLIED", "WHERE"],
              [[r["state"], r["knob"], r["requested"], r["applied"], r["where"] + (f": {r['note']}" if r["note"] else "")]
               for r in applied.get("rows", [])],
              title=f"what vLLM applied ({len(applied.get('mismatches', []))} mismatch(es))")
        b = applied.get("backends") or {}
        if b:
            print("backends: " + ", ".join(f"{k} {v}" for k, v in b.items()))
    _print_vllm_choices(data.get("vllm_choices"))
    if not agree:
        print("r9kctl status: the server's processes report different hashes", file=sys.stderr)
        return 1
    return 0


def _print_vllm_choices(ch) -> None:
    """vLLM's kernel choices per layer kind beside the profile's vLLM switches, and the tuned-config source of
    each of this project's kernel packages (plugin/vllm_choices.py)."""
    if not ch:
        return
    rows = []
    for kind, d in sorted(ch.get("layers", {}).items()):
        for k, e in sorted(d.items()):
            how = ", ".join(x for x in (e.get("method") or e.get("impl"), e.get("kernel") and f"kernel {e['kernel']}") if x)
            rows.append([kind, k, e.get("layers", 0), how or "-"])
    for n, e in sorted(ch.get("custom_ops", {}).items()):
        state = {True: "enabled (vLLM's kernel)", False: "native"}.get(e.get("enabled"), "?")
        rows.append(["custom op", n, e.get("layers", 0), f"{state}: {e.get('path')}"])
    for k, t in sorted(ch.get("moe_tuned_config", {}).items()):
        rows.append(["moe config", k, "-", t.get("source", "?")])
    for pkg, t in sorted(ch.get("r9k_tuned", {}).items()):
        rows.append(["r9k tuned config", pkg, "-", f"{t.get('source')} (device {t.get('device')})"])
    table(["LAYER KIND", "VLLM CHOSE", "LAYERS", "HOW"], rows, title=f"what vLLM chose per layer ({ch.get('process')})")
    if ch.get("rows"):
        table(["STATE", "KNOB", "SWITCH", "LAYER", "REQUESTED", "VLLM CHOSE"],
              [[r["state"], r["knob"], r["switch"], r["layer"], r["requested"],
                (r["chosen"] or "?") + (f": {r['note']}" if r["note"] else "")] for r in ch["rows"]],
              title=f"vLLM switches: requested vs chosen ({len(ch.get('mismatches', []))} mismatch(es))")
    if ch.get("fallbacks"):  # plugin/fallback.py: left to vLLM, off the declared fast path
        table(["KNOB", "LAYER", "FAST PATH", "VLLM RAN", "LAYERS", "RESTORE WITH"],
              [[r["knob"], r["layer"], f"{r['fast']} ({r['platform']})", ", ".join(r["slow"]), r["slow_layers"],
                r["restore"]] for r in ch["fallbacks"]], title=f"slow fallbacks ({len(ch['fallbacks'])})")
