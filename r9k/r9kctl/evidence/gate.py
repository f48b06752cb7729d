"""``r9kctl gate``: run the declared gate tests of variants through pytest and record them in the ledger.

The variants named, or those a profile moves off stock (``rs.non_stock()``). One ``python -m pytest``
subprocess over the selected gates' test files, with :mod:`r9k.r9kctl.evidence.pytest_plugin` selecting
items and streaming events (``TRITON_INTERPRET=1`` without a GPU device node, unless set); one ledger record
per variant with every item's outcome and the variant's source hash.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ...registry import envvars, fileio
from ...registry import ledger as L

from ...registry import provenance  # toolchain() looked up at call time (replaceable)


@dataclass
class GatePlan:
    variants: list[Any]  # variants with declared gate tests, in order
    no_tests: list[Any] = field(default_factory=list)  # selected variants that declare no gate tests

    @property
    def test_ids(self) -> list[str]:
        return list(dict.fromkeys(t for v in self.variants for t in L.declared_tests(v)))


@dataclass
class GateRun:
    records: list[L.GateRecord]
    platform: str
    exitstatus: int | None
    log: str  # pytest's own output (tail kept)
    collect_errors: dict[str, str] = field(default_factory=dict)


def plan(reg: Any, profile: str | None = None, names: Iterable[str] = (), tp: int | None = None,
         include_unset: bool = False) -> GatePlan:
    """Select the gates to run: the named variants (ids or knobs), or the non-stock variants of ``profile``."""
    chosen: list[Any] = []
    if profile:
        from ...registry.resolve import resolve

        rs = resolve(reg, profile, tp=tp)
        chosen += [reg.variants[r.variant.id] for r in rs.non_stock()]
    chosen += [reg.variant(name) for name in names]
    out = GatePlan([])
    for v in {v.id: v for v in chosen}.values():
        (out.variants if L.declared_tests(v) else out.no_tests).append(v)
    return out


def _git(root: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def run(reg: Any, gate_plan: GatePlan, *, record: bool = True, ledger: str | Path | None = None,
        progress: Callable[[str], None] | None = None, timeout_s: float | None = None,
        pytest_args: Iterable[str] = (), env: dict[str, str] | None = None) -> GateRun:
    """Run the planned gates; append one ledger record per variant unless ``record`` is False.
    ``env``: extra environment variables of the pytest run (the mutation test's)."""
    root = L.repo_root(reg)
    say = progress or (lambda _msg: None)
    declared = gate_plan.test_ids

    deps = {v.id: L.file_hashes(reg, v) for v in gate_plan.variants}  # before the run: what it tests
    tc = provenance.toolchain()
    commit = _git(root, "rev-parse", "--short", "HEAD")
    dirty = None
    if commit is not None:
        dirty = bool(_git(root, "status", "--porcelain", "--", *sorted({p for files, _ in deps.values()
                                                                       for p in files if p != provenance.PYTEST_CONFIG})))
    outcomes: dict[str, str] = {}
    ran_on: dict[str, str | None] = {}  # nodeid -> "gpu" | "cpu" (the plugin's)
    collect_errors: dict[str, str] = {}
    platform, exitstatus = "unknown", None
    t0 = time.monotonic()
    existing = [t for t in declared if (root / L.test_file(t)).is_file()]
    not_found = [t for t in declared if t not in existing]
    log_tail = ""
    if existing:
        files = list(dict.fromkeys(L.test_file(t) for t in existing))
        with tempfile.TemporaryDirectory(prefix="r9k-gate-") as tmp:
            events = Path(tmp) / "events.jsonl"
            logf = Path(tmp) / "pytest.log"
            env = dict(os.environ, **(env or {}))
            env[envvars.GATE_EVENTS.name] = str(events)
            env[envvars.GATE_SELECT.name] = json.dumps(existing)
            if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")):  # no GPU device node
                env.setdefault("TRITON_INTERPRET", "1")
            cmd = [sys.executable, "-m", "pytest", "-p", "r9k.r9kctl.evidence.pytest_plugin",
                   "-p", "no:cacheprovider", "--rootdir", str(root), "-q", "-rfE", "--continue-on-collection-errors", *pytest_args, *(f"{root.name}/{f}" for f in files)]
            say(f"running {len(existing)} gate test id(s) of {len(gate_plan.variants)} variant(s): "
                f"{' '.join(cmd[1:4])} ... {len(files)} file(s)")
            with fileio.open_for_writing(logf, what="log file") as log:
                # run from the folder that holds the package r9k/: that tree's own r9k is imported
                proc = subprocess.Popen(cmd, cwd=root.parent, env=env, stdout=log, stderr=subprocess.STDOUT)
                pos, total, done = 0, None, 0
                while True:
                    finished = proc.poll() is not None
                    if events.exists():
                        with events.open(encoding="utf-8") as fh:
                            fh.seek(pos)
                            chunk = fh.read()
                        # Only consume whole lines; the plugin may be mid-write.
                        usable = chunk[: chunk.rfind("\n") + 1]
                        pos += len(usable.encode("utf-8"))
                        for line in usable.splitlines():
                            ev = json.loads(line)
                            if ev["event"] == "selected":
                                total = len(ev["items"])
                                not_found += ev["not_found"]
                                say(f"{total} test item(s) selected" + (
                                    f"; not found: {', '.join(ev['not_found'])}" if ev["not_found"] else ""))
                            elif ev["event"] == "result":
                                done += 1
                                outcomes[ev["nodeid"]] = ev["outcome"]
                                ran_on[ev["nodeid"]] = ev.get("ran_on")
                                say(f"[{done}/{total or '?'}] {ev['outcome']:<9} {ev['nodeid']}")
                            elif ev["event"] == "collect-error":
                                collect_errors[ev["nodeid"]] = ev["message"]
                                say(f"collection error in {ev['nodeid']}: {ev['message']}")
                            elif ev["event"] == "finish":
                                platform, exitstatus = ev["platform"], ev["exitstatus"]
                    if finished:
                        break
                    if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                        proc.kill()
                        proc.wait()
                        say(f"timed out after {timeout_s:.0f} s; unfinished tests are recorded as not-run")
                        break
                    time.sleep(0.2)
            if exitstatus is None:
                exitstatus = proc.returncode
            log_tail = logf.read_text(errors="replace")[-6000:]
    duration = time.monotonic() - t0
    records: list[L.GateRecord] = []
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for v in gate_plan.variants:
        mine: dict[str, str] = {}
        for t in L.declared_tests(v):
            items = {n: o for n, o in outcomes.items() if L.item_of(n, t)}
            if items:
                mine.update(items)
            elif any(L.test_file(t) == f.split("::")[0] for f in collect_errors):
                mine[t] = L.ERROR  # its file did not import: no items, but not a wrong id either
            elif t in not_found:
                mine[t] = L.NOT_FOUND
            else:
                mine[t] = L.NOT_RUN
        files, missing = deps[v.id]
        for where, part, where_tc in L.split_by_where_it_ran(mine, ran_on, platform, tc):
            records.append(L.GateRecord(
                variant=v.id, tests=L.declared_tests(v), result=L.summarize(part), outcomes=part,
                platform=where, date=date, source_hash=L.hash_of(files, missing), files=len(files),
                commit=commit, dirty=dirty, duration_s=round(duration, 2),  # of the whole pytest run
                deps=files, toolchain=where_tc, ran_at=provenance.checkout_id(root)))
    if record and records:
        L.append_records(ledger or L.ledger_path(reg), records)
    return GateRun(records, platform, exitstatus, log_tail, collect_errors)
