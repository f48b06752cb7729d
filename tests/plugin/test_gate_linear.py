"""The gate_linear adapter: vLLM builds R9kGateLinear through register_oot, and its forward runs the
router op the dispatch table chose (the Triton kernel, here under the interpreter)."""
from __future__ import annotations

import pytest

from r9k.registry import envvars

torch = pytest.importorskip("torch")


def _build(cfg, hidden, experts):
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with set_current_vllm_config(cfg):
            return GateLinear(hidden, experts, prefix="model.layers.0.mlp.gate")
    finally:
        torch.set_default_dtype(old)


def test_vllm_builds_the_adapter_and_it_runs_the_chosen_kernel(plugin_env, vllm_ctx, seed):
    from r9k.plugin import report
    import r9k.plugin as plugin
    from r9k.kernels import ops
    from r9k.plugin.dispatch import get_table
    from r9k.plugin.layers.gate_linear import R9kGateLinear

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setattr(report, "emit", lambda level, line: None)
    plugin.register()
    assert get_table().plans["router_gemm"].state == "fused", get_table().plans["router_gemm"].reason

    g = torch.Generator().manual_seed(seed)
    layer = _build(vllm_ctx, 256, 16)
    assert type(layer) is R9kGateLinear, "GateLinear(...) must construct the out-of-tree replacement"
    assert layer._r9k_choice is not None and layer._r9k_choice.state == "fused"
    assert layer._r9k_choice.fn is ops.get("router_gemm").fused
    with torch.no_grad():
        layer.weight.copy_(torch.randn(16, 256, generator=g).to(torch.bfloat16))

    for m in (1, 3, 8):
        x = torch.randn(m, 256, generator=g).to(torch.bfloat16)
        out, bias = layer(x)
        assert bias is None and out.dtype == torch.bfloat16 and out.shape == (m, 16)
        ref = (x.double() @ layer.weight.double().t())
        # fp32 accumulation, one bf16 rounding: within one bf16 ulp of the exact value
        assert torch.allclose(out.double(), ref, rtol=2 ** -7, atol=1e-3), (out.double() - ref).abs().max()
        assert torch.isfinite(out).all()

    # the op is a torch custom op, so torch.compile sees one opaque call
    assert hasattr(torch.ops.r9k, "router_gemm_fused")


def test_stock_value_leaves_vllms_layer_alone(plugin_env, vllm_ctx):
    from r9k.plugin import report
    import r9k.plugin as plugin
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

    plugin_env.setenv(envvars.PROFILE.name, "cpu-smoke")
    plugin_env.setenv("R9K_ROUTER", "stock")
    plugin_env.setattr(report, "emit", lambda level, line: None)
    plugin.register()
    layer = _build(vllm_ctx, 128, 8)
    assert type(layer) is GateLinear
