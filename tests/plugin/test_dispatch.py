"""The dispatch table: fused where it can run, fallback to stock with one warning, strict mode."""
from __future__ import annotations

import pytest

from r9k.plugin.dispatch import DispatchTable
from r9k.plugin.startup import StartupError


def _rs(registry, **env):
    from r9k.registry.resolve import resolve

    from r9k.registry.manifest import from_resolved

    rs = resolve(registry, "cpu-smoke", env=env)
    assert rs.ok, [d.format() for d in rs.diagnostics]
    return from_resolved(rs)


def test_fused_when_the_platform_runs_triton(registry):
    from r9k.kernels import ops

    t = DispatchTable(_rs(registry), platform_probe=lambda: "interpret")
    plans = t.plan()
    assert plans["router_gemm"].state == "fused"
    assert [p.variant_id for p in t.installs()] == ["router_gemm"]
    assert t.warnings == []
    c = t.choose("router_gemm", layer="model.layers.0.mlp.gate")
    assert c is not None and c.state == "fused" and c.fn is ops.get("router_gemm").fused
    assert t.choose("router_gemm") is c, "one choice per op and process, not one per layer"
    assert plans["router_gemm"].layers == 2
    assert "fused" in t.in_use()["router_gemm"]


def test_stock_value_installs_nothing(registry):
    t = DispatchTable(_rs(registry, R9K_ROUTER="stock"), platform_probe=lambda: "interpret")
    t.plan()
    assert t.plans["router_gemm"].state == "stock"
    assert t.installs() == []
    assert t.choose("router_gemm") is None  # the layer keeps vLLM's own path
    assert "router_gemm" not in t.in_use()


def test_fallback_to_stock_with_one_warning_line(registry):
    t = DispatchTable(_rs(registry), platform_probe=lambda: None)  # CPU without the interpreter
    t.plan()
    p = t.plans["router_gemm"]
    assert p.state == "fallback" and "no Triton backend" in p.reason
    assert len(t.warnings) == 1 and t.warnings[0].startswith("R9K_ROUTER=r9k: ")
    assert "using vLLM's own path (R9K_ROUTER=stock)" in t.warnings[0]
    assert t.installs() == []
    assert t.choose("router_gemm") is None
    assert t.in_use()["router_gemm"].startswith("stock (fallback")


def test_strict_mode_stops_the_start(registry):
    t = DispatchTable(_rs(registry), strict=True, platform_probe=lambda: None)
    with pytest.raises(StartupError) as ei:
        t.plan()
    assert "error[no-implementation]" in str(ei.value) and "R9K_ROUTER=r9k" in str(ei.value)


def test_declared_platforms_restrict_where_it_runs(registry):
    rs = _rs(registry)
    impl = rs.items["router_gemm"].variant.implementation
    old = list(impl.platforms)
    impl.platforms = ["cuda-h200"]
    try:
        t = DispatchTable(rs, platform_probe=lambda: "interpret")
        t.plan()
        assert t.plans["router_gemm"].state == "fallback"
        assert "cuda-h200" in t.plans["router_gemm"].reason
        impl.platforms = ["triton-interpret"]
        t = DispatchTable(rs, platform_probe=lambda: "interpret")
        t.plan()
        assert t.plans["router_gemm"].state == "fused"
    finally:
        impl.platforms = old


def test_a_variant_without_adapter_or_implementation_falls_back(registry):
    rs = _rs(registry)
    impl = rs.items["router_gemm"].variant.implementation
    old = impl.extension_point
    impl.extension_point = "custom_op:r9k_no_adapter_here"  # an extension point registry/adapters.toml lacks
    try:
        t = DispatchTable(rs, platform_probe=lambda: "interpret")
        t.plan()
        assert t.plans["router_gemm"].state == "fallback"
        assert "no adapter for custom_op:r9k_no_adapter_here" in t.plans["router_gemm"].reason
        assert t.installs() == []
        with pytest.raises(StartupError):
            DispatchTable(rs, strict=True, platform_probe=lambda: "interpret").plan()
    finally:
        impl.extension_point = old


def test_a_kernel_that_does_not_load_is_one_located_line(registry, monkeypatch):
    from r9k.kernels import ops

    def broken(name):
        raise ImportError("libtriton.so: cannot open shared object file")

    monkeypatch.setattr(ops, "get", broken)
    t = DispatchTable(_rs(registry), platform_probe=lambda: "interpret")
    t.plan()
    assert t.choose("router_gemm", layer="model.layers.0.mlp.gate") is None
    line = t.warnings[-1]
    assert "\n" not in line and "error[kernel-import]" in line and "test_dispatch.py:" in line
    assert "variant router_gemm (R9K_ROUTER=r9k), layer model.layers.0.mlp.gate" in line and "libtriton" in line
    assert t.plans["router_gemm"].state == "fallback"
    assert t.choose("router_gemm", layer="model.layers.1.mlp.gate") is None  # later layers: vLLM's path
    strict = DispatchTable(_rs(registry), strict=True, platform_probe=lambda: "interpret")
    strict.plan()
    with pytest.raises(StartupError) as ei:
        strict.choose("router_gemm", layer="model.layers.0.mlp.gate")
    assert "error[kernel-import]" in str(ei.value) and ei.value.__cause__ is None
