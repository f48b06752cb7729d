"""pytest plugin used by ``r9kctl gate`` (``-p r9k.r9kctl.evidence.pytest_plugin``), inactive unless the
gate runner sets its variables:

* ``envvars.GATE_SELECT`` (JSON list of declared test ids): keeps the items they name and reports ids that
  name nothing as ``not-found`` (instead of pytest's usage error aborting the run);
* tests marked ``gpu`` are skipped without a visible GPU, reported as ``needs-gpu``;
* ``envvars.GATE_EVENTS`` (path): one JSON line per event (``selected``, ``result``, ``finish``).
"""
from __future__ import annotations

import json
import sys

from ...registry import envvars, fileio, provenance
from ...registry.provenance import normalize_device, platform_name as name
from ...registry.ledger import item_of

_events_path = envvars.GATE_EVENTS.get()
_select = json.loads(envvars.GATE_SELECT.get()) if envvars.GATE_SELECT.get() else None
_outcomes: dict[str, str] = {}
_ran_on: dict[str, str] = {}  # nodeid -> "gpu" | "cpu": where its code ran (provenance.ran_on)
_gpu: bool | None = None

_RANK = {"passed": 0, "skipped": 1, "needs-gpu": 1, "failed": 2, "error": 3}


def _emit(obj: dict) -> None:
    if _events_path:
        with fileio.open_for_writing(_events_path, append=True, what="event file") as fh:
            fh.write(json.dumps(obj) + "\n")


def gpu_available() -> bool:
    global _gpu
    if _gpu is None:
        try:
            import torch

            _gpu = bool(torch.cuda.is_available())
        except Exception:  # no torch, or a broken driver: either way nothing can run on a GPU here
            _gpu = False
    return _gpu


def platform_name() -> str:
    torch = sys.modules.get("torch")
    if torch is not None and _gpu:
        kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        return name(normalize_device(torch.cuda.get_device_name(0)), kind)
    return name("cpu")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA/ROCm GPU (skipped without one)")


def pytest_collection_modifyitems(session, config, items):
    if _select is None:
        return
    keep, drop = [], []
    for item in items:
        (keep if any(item_of(item.nodeid, d) for d in _select) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    found = {d: [i.nodeid for i in keep if item_of(i.nodeid, d)] for d in _select}
    _emit({"event": "selected", "items": [i.nodeid for i in keep],
           "not_found": [d for d, v in found.items() if not v]})


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not gpu_available():
        import pytest

        pytest.skip("needs a GPU (test is marked gpu)")


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "needs-gpu" if "gpu" in report.keywords else "skipped"
        else:
            outcome = "passed"
        prev = _outcomes.get(report.nodeid)
        if prev is None or _RANK[outcome] > _RANK[prev]:
            _outcomes[report.nodeid] = outcome


def pytest_runtest_logstart(nodeid, location):
    provenance.test_started(nodeid)


def pytest_runtest_teardown(item):
    _ran_on[item.nodeid] = provenance.ran_on(item)


def pytest_runtest_logfinish(nodeid, location):
    if nodeid in _outcomes:
        _emit({"event": "result", "nodeid": nodeid, "outcome": _outcomes[nodeid], "ran_on": _ran_on.get(nodeid)})


def pytest_collectreport(report):
    if report.failed:
        _emit({"event": "collect-error", "nodeid": report.nodeid,
               "message": str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else ""})


def pytest_sessionfinish(session, exitstatus):
    _emit({"event": "finish", "platform": platform_name(), "exitstatus": int(exitstatus)})
