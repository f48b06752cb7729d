"""Order of the test run: the end-to-end tests (real vLLM launches, minutes each) first, longest first.

``scripts/test.sh`` runs two xdist workers that take a test (or a group of tests, below) at a time (``--dist
loadgroup --no-loadscope-reorder``): started first, the long launches run side by side with the short tests
instead of leaving one worker alone with the last of them. A module's ``E2E_MINUTES`` (its measured wall time on a 2-core machine, rounded up)
puts it before the shorter ones; an e2e test without it counts as one minute, and a module may declare it without the e2e mark (a slow
multi-process test that starts no server). Stable: the rest keeps pytest's
order.

Also here: the shared cpu-smoke server (``cpu_smoke_server``: tests/servers.SharedServer; its tests carry
``xdist_group(SharedServer.GROUP)`` so that one worker runs them in a row, and it is stopped after the last of
them), and the failure report of every e2e test, which ends with the last lines of each server's log.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from servers import LOG_TAIL_LINES, Server, SharedServer


def _weight(item) -> float:
    minutes = getattr(getattr(item, "module", None), "E2E_MINUTES", None)
    if minutes is not None:
        return float(minutes)
    return 1.0 if item.get_closest_marker("e2e") is not None else 0.0


def _shared(item) -> bool:
    return "cpu_smoke_server" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    # the shared server's tests run as one unit (xdist's loadgroup sends them to one worker): they sort together,
    # by the sum of their weights, so that without xdist too the server starts once
    group = sum(_weight(it) for it in items if _shared(it))
    items.sort(key=lambda it: (-(group if _shared(it) else _weight(it)), not _shared(it)))


@pytest.fixture
def cpu_smoke_server(tmp_path_factory, request):
    """The running cpu-smoke server the group's tests share (tests/servers.SharedServer), started on first use."""
    return SharedServer.get(tmp_path_factory, request.node.nodeid)


def pytest_runtest_teardown(item, nextitem):
    """Stop the shared server after the last test that uses it (an idle vLLM still polls its queues)."""
    if _shared(item) and (nextitem is None or not _shared(nextitem)):
        SharedServer.stop_current()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing e2e test's report ends with the last lines of the log of every vLLM server it started
    (``servers.Server``, the helper every e2e test uses) and of the shared server it used: the server's own
    error, not only the client's HTTP status."""
    outcome = yield
    rep = outcome.get_result()
    mine = [s for s in Server.started if getattr(s, "test_id", None) in (None, item.nodeid)]
    for s in mine:
        s.test_id = item.nodeid  # claimed by the test that was running when it started
    cur = SharedServer._current
    if cur is not None and item.nodeid in cur.users and cur.srv not in mine:
        mine.append(cur.srv)
    if rep.failed:
        for s in mine:
            rep.sections.append((f"server log {s.log} (last {len(s.tail().splitlines())} lines)", s.tail()))
        # servers an e2e test started otherwise (its own Popen, r9kctl bench serve, the panel): their logs in
        # the test's folder
        tmp = (getattr(item, "funcargs", None) or {}).get("tmp_path")
        if item.get_closest_marker("e2e") is not None and tmp is not None:
            seen = {Path(s.log) for s in mine}
            logs = sorted((f for f in Path(tmp).rglob("*.log") if f.is_file() and f not in seen),
                          key=lambda f: f.stat().st_mtime, reverse=True)[:4]
            for f in logs:
                lines = f.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                rep.sections.append((f"log {f} (last {len(lines)} lines)", "\n".join(lines)))
