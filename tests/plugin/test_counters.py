"""plugin/report.py: the interface real-core reports (layer / hit / snapshot)."""
from __future__ import annotations

import pytest

from r9k.plugin import report


@pytest.fixture(autouse=True)
def _clean():
    report.reset()
    yield
    report.reset()


def test_layers_and_calls_are_reported_per_op():
    report.layer("router_gemm", "model.layers.0.mlp.gate", True)
    report.layer("router_gemm", "model.layers.1.mlp.gate", False, "gate with bias")
    report.layer("router_gemm", "model.layers.2.mlp.gate", False, "gate with bias")
    report.layer("fused_routing", "model.layers.0.mlp.experts", False)
    for _ in range(3):
        report.hit("router_gemm")
    report.hit("router_gemm", "fallback:rows>16")
    report.hit("qk_rope")
    snap = report.snapshot()
    assert snap["router_gemm"] == {
        "installed": ["model.layers.0.mlp.gate"],
        "kept": {"gate with bias": ["model.layers.1.mlp.gate", "model.layers.2.mlp.gate"]},
        "calls": {"fused": 3, "fallback:rows>16": 1},
    }
    assert snap["fused_routing"] == {"installed": [], "kept": {"unspecified": ["model.layers.0.mlp.experts"]},
                                     "calls": {}}
    # calls of an op whose layers were never recorded still show up
    assert snap["qk_rope"] == {"installed": [], "kept": {}, "calls": {"fused": 1}}
    assert report.calls("router_gemm") == 3 and report.calls("router_gemm", "fallback:rows>16") == 1


def test_snapshot_is_a_copy():
    report.layer("router_gemm", "a", True)
    report.hit("router_gemm")
    snap = report.snapshot()
    snap["router_gemm"]["installed"].append("b")
    snap["router_gemm"]["calls"]["fused"] = 99
    report.hit("router_gemm")
    again = report.snapshot()
    assert again["router_gemm"]["installed"] == ["a"]
    assert again["router_gemm"]["calls"] == {"fused": 2}


def test_hit_is_cheap():
    import timeit

    n = 200_000
    per_call = timeit.timeit(lambda: report.hit("router_gemm"), number=n) / n
    assert report.calls("router_gemm") == n
    # a dict lookup and an add: well under a microsecond here; 20 us would mean something went wrong
    assert per_call < 20e-6, per_call
