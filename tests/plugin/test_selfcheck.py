"""The startup self-check (plugin/selfcheck.py): its bound, the hook, strict refusal and the fallback.

Unit level, no vLLM server: the router's real kernel (Triton interpreter) against its stock path at a tiny
gate's shapes, and broken stand-ins (zeros, noise, 1% off). The served end-to-end case is
tests/plugin/test_e2e_selfcheck.py.
"""
from __future__ import annotations

import time

import pytest
import torch

from r9k.plugin import selfcheck
from r9k.registry import envvars


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    selfcheck._reset_for_tests()
    monkeypatch.delenv(envvars.SELFCHECK.name, raising=False)
    yield
    selfcheck._reset_for_tests()


def _router():
    from r9k.kernels import ops

    return ops.get("router_gemm")


@pytest.mark.parametrize("broken, passes", [
    (None, True),
    (lambda f: lambda x, w: f(x, w).zero_(), False),                      # the zeros
    (lambda f: lambda x, w: torch.randn_like(f(x, w)), False),            # noise
    (lambda f: lambda x, w: (f(x, w).float() * 1.01).to(torch.bfloat16), False),  # 1% off
])
def test_the_router_kernel_against_its_stock_path(monkeypatch, broken, passes):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    op = _router()
    fused = op.fused if broken is None else broken(op.fused)
    w = torch.empty((48, 64), dtype=torch.bfloat16)  # a tiny gate: 48 experts, hidden 64
    why = selfcheck.check(op.name, fused, op.stock, selfcheck.probe_linear(w))
    assert (why is None) == passes, why
    if not passes:
        assert "relative L2 error" in why


def test_bound_catches_shape_and_nan():
    r = torch.ones(4, 8, dtype=torch.bfloat16)
    assert "shape" in selfcheck.default_bound(torch.ones(4, 9, dtype=torch.bfloat16), r)
    assert "non-finite" in selfcheck.default_bound(torch.full((4, 8), float("nan"), dtype=torch.bfloat16), r)
    assert selfcheck.default_bound(r.clone(), r) is None


class _Table:
    def __init__(self, strict):
        self.strict, self.plans, self.on_change = strict, {}, None


def _choice(fn):
    from r9k.registry.availability import Decision

    return Decision("router_gemm", "R9K_ROUTER", "r9k", "fused", op="router_gemm", fn=fn, used="test")


@pytest.mark.parametrize("strict, env, runs", [(False, None, False), (True, None, True), (False, "1", True),
                                               (True, "0", False)])
def test_when_it_runs_and_what_a_failure_does(monkeypatch, strict, env, runs):
    from r9k.plugin import dispatch
    from r9k.plugin.startup import StartupError

    if env is not None:
        monkeypatch.setenv(envvars.SELFCHECK.name, env)
    monkeypatch.setattr(dispatch, "get_table", lambda: _Table(strict))
    zeros = _choice(lambda x, w: torch.zeros((x.shape[0], w.shape[0]), dtype=x.dtype))
    probe = lambda: selfcheck.probe_linear(torch.empty((8, 16), dtype=torch.bfloat16))  # noqa: E731
    if runs and strict:
        with pytest.raises(StartupError, match=r"self-check.*router_gemm.*relative L2 error"):
            selfcheck.verify(zeros, "model.layers.0.mlp.gate", probe)
    elif runs:
        why = selfcheck.verify(zeros, "model.layers.0.mlp.gate", probe)
        assert why.startswith("self-check failed: relative L2 error")
    else:
        assert selfcheck.verify(zeros, "model.layers.0.mlp.gate", probe) is None


def test_the_hook_keeps_vllms_path_for_a_failing_layer(monkeypatch):
    """eligible_choice with a probe: a failing kernel -> no choice; the counters record why."""
    from r9k.plugin import report, dispatch
    from r9k.plugin.layers import _common

    monkeypatch.setenv(envvars.SELFCHECK.name, "1")
    zeros = _choice(lambda x, w: torch.zeros((x.shape[0], w.shape[0]), dtype=x.dtype))
    monkeypatch.setattr(dispatch, "get_table", lambda: _Table(False))
    monkeypatch.setattr(_common, "choose", lambda op, layer: zeros)
    kept = []
    monkeypatch.setattr(report, "layer", lambda op, layer, installed, reason=None: kept.append((installed, reason)))
    probe = lambda: selfcheck.probe_linear(torch.empty((8, 16), dtype=torch.bfloat16))  # noqa: E731
    assert _common.eligible_choice("router_gemm", "m.gate", lambda: "", probe=probe) is None
    assert kept and kept[0][0] is False and kept[0][1].startswith("self-check failed")


def test_every_layer_of_a_refused_op_is_counted_stock_and_the_plan_says_fallback(monkeypatch):
    """Issue 38 item 7: after the first layer's self-check fails, the plan falls back; the later layers of the
    op must be accounted for as stock too (both router layers of the tiny MoE, not only the first), and the
    process's plan counts show no installed kernel for it."""
    from r9k.plugin import report, dispatch
    from r9k.plugin.layers import _common
    from r9k.registry import load_registry
    from r9k.registry.manifest import from_resolved
    from r9k.registry.resolve import resolve

    monkeypatch.setenv(envvars.SELFCHECK.name, "1")
    rs = from_resolved(resolve(load_registry(), "cpu-smoke", env={}))
    table = dispatch.DispatchTable(rs, strict=False, platform_probe=lambda: "interpret")
    table.plan()
    vid = table.by_op["router_gemm"]
    assert table.plans[vid].state == "fused"
    old = dispatch.get_table()
    dispatch.set_table(table)
    monkeypatch.setattr(_common, "get_table", lambda: table)
    monkeypatch.setattr(selfcheck, "check", lambda *a, **k: "relative L2 error 1 against stock > 0.0039")
    report.reset()
    try:
        probe = lambda: selfcheck.probe_linear(torch.empty((8, 16), dtype=torch.bfloat16))  # noqa: E731
        for layer in ("model.layers.0.mlp.gate", "model.layers.1.mlp.gate"):
            assert _common.eligible_choice("router_gemm", layer, lambda: "", probe=probe) is None
        snap = report.snapshot()["router_gemm"]
        assert snap["installed"] == []
        (reason, layers), = snap["kept"].items()
        assert reason.startswith("self-check failed") and len(layers) == 2, snap
        counts = report.plan_counts(table)
        assert counts["installed"] == 0 and counts["fallbacks"][table.plans[vid].knob].startswith("self-check failed")
    finally:
        report.reset()
        dispatch.set_table(old)


def test_the_status_plan_is_the_model_building_workers(tmp_path):
    """The API server plans the router fused; the worker's self-check refused it: the merged status shows the
    worker's plan (no kernel installed, the fallback and its reason), not the front's."""
    import json

    from r9k.plugin import report

    def sec(name, role, plan):
        return {"profile": "p", "hash": "h", "tp": 1, "model": "m", "platform": "cpu", "origin": "o", "strict": False,
                "values": {}, "non_stock": [], "process": {"name": name, "pid": 1, "role": role, "rank": 0,
                                                           "node": "x"}, "plan": plan, "counters": {}}

    front = sec("MainProcess", "main", {"installed": 1, "fallback": 0, "env_only": 0, "fallbacks": {}})
    worker = sec("VllmWorker-0", "worker", {"installed": 0, "fallback": 1, "env_only": 0,
                                            "fallbacks": {"R9K_ROUTER": "self-check failed: zeros"}})
    f = tmp_path / "status.json"
    f.write_text(json.dumps({"processes": {"VllmWorker-0": worker}}))
    data = report.merged_status(front, str(f))
    assert data["plan"]["installed"] == 0 and data["plan"]["fallbacks"] == {"R9K_ROUTER": "self-check failed: zeros"}


@pytest.mark.parametrize("broken, passes", [
    (None, True),
    (lambda f: lambda x, w: f(x, w).zero_(), False),                      # the served case's zeros
    (lambda f: lambda x, w: torch.randn_like(f(x, w)), False),            # noise
])
def test_the_shared_expert_probe_passes_its_kernel_and_refuses_a_broken_one(monkeypatch, broken, passes):
    """The shared expert's probe (random rows and MXFP4-grid weights at the layer's H and I) and its bound (one
    e4m3 step): the real kernel passes under the interpreter, zeros and noise do not."""
    from types import SimpleNamespace as NS

    from r9k.kernels import ops
    from r9k.plugin.layers import moe_runner

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    op = ops.get("shared_expert")
    module = NS(down_proj=NS(weight=torch.empty((64, 128), dtype=torch.bfloat16)))  # H 64, I 128
    args = moe_runner._shared_probe(module)
    assert tuple(args[0].shape) == (4, 64) and args[1].intermediate == 128
    fused = op.fused if broken is None else broken(op.fused)
    why = selfcheck.check(op.name, fused, op.stock, args, moe_runner._shared_bound)
    assert (why is None) == passes, why


def test_a_refused_probe_is_named_by_shapes_not_values(monkeypatch):
    """The strict refusal's one line names each probe argument by its shape (the shared expert's weights by
    their tensors' shapes): on the GPU it printed the packed weights' values, a tensor dump mid-line."""
    from types import SimpleNamespace as NS

    from r9k.plugin import dispatch
    from r9k.plugin.layers import moe_runner
    from r9k.registry.availability import Decision
    from r9k.plugin.startup import StartupError

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(dispatch, "get_table", lambda: _Table(True))
    module = NS(down_proj=NS(weight=torch.empty((64, 128), dtype=torch.bfloat16)))
    zeros = Decision("shared_expert", "R9K_SHARED_EXPERT", "r9k", "fused", op="shared_expert",
                     fn=lambda x, w: torch.zeros_like(x), used="test")
    with pytest.raises(StartupError) as err:
        selfcheck.verify(zeros, "model.layers.0.mlp.shared_expert", lambda: moe_runner._shared_probe(module),
                         moe_runner._shared_bound)
    line = next(ln for ln in err.value.lines if "error[self-check]" in ln)
    assert "tensor(" not in line and "\n" not in line, line
    assert "probe [4x64, SharedExpertWeights(w1_packed=256x32, " in line, line
