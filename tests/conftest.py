"""Order of the test run: the end-to-end tests (real vLLM launches, minutes each) first, longest first.

``scripts/test.sh`` runs two xdist workers that take one test at a time (``--dist load --maxschedchunk 1``):
started first, the long launches run side by side with the short tests instead of leaving one worker alone
with the last of them. A module's ``E2E_MINUTES`` (its measured wall time on a 2-core machine, rounded up)
puts it before the shorter ones; an e2e test without it counts as one minute, and a module may declare it without the e2e mark (a slow
multi-process test that starts no server). Stable: the rest keeps pytest's
order.
"""
from __future__ import annotations


def _weight(item) -> float:
    minutes = getattr(getattr(item, "module", None), "E2E_MINUTES", None)
    if minutes is not None:
        return float(minutes)
    return 1.0 if item.get_closest_marker("e2e") is not None else 0.0


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda it: -_weight(it))
