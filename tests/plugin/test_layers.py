"""The adapters of plugin/layers/ on vLLM's own classes (no server): each is installed where the
dispatch table says so, computes what vLLM's path computes (within the stated bound), and records
its layers and calls in plugin/report.py. The served end to end: tests/plugin/test_e2e_adapters.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from r9k.registry import envvars

torch = pytest.importorskip("torch")


@pytest.fixture
def active(plugin_env):
    """The plugin registered for cpu-qwen2-moe (router, fused routing, shared expert on), fresh counters."""
    import r9k.plugin as plugin
    from r9k.plugin import report

    report.reset()
    plugin_env.setenv(envvars.PROFILE.name, "cpu-qwen2-moe")
    plugin_env.setattr(report, "emit", lambda level, line: None)
    plugin.register()
    yield plugin_env
    report.reset()


def _sorted(w, ids):
    order = ids.long().argsort(dim=-1)
    return w.gather(-1, order), ids.long().gather(-1, order)


def test_fused_routing_replaces_vllms_cpu_router_and_agrees_with_it(active, seed):
    from vllm.model_executor.layers.fused_moe.router.cpu_router import CPURouter

    from r9k.plugin import report
    from r9k.plugin.layers.moe_runner import attach_routing

    g = torch.Generator().manual_seed(seed)
    ours = CPURouter(top_k=2, global_num_experts=8, renormalize=True)
    runner = SimpleNamespace(router=ours, _quant_method=None)
    attach_routing(runner, "model.layers.0.mlp.experts")
    assert type(ours).__name__ == "R9kCPURouter"
    vllm = CPURouter(top_k=2, global_num_experts=8, renormalize=True)
    for m in (3, 20):  # 20 rows: above the interpreter's fused range, vLLM's own routing
        logits = (torch.randn(m, 8, generator=g) * 3).to(torch.bfloat16)
        hs = torch.zeros(m, 16, dtype=torch.bfloat16)
        w1, i1 = _sorted(*ours.select_experts(hs, logits))
        w2, i2 = _sorted(*vllm.select_experts(hs, logits))
        assert torch.equal(i1, i2), (i1, i2)  # random logits: no ties
        # vLLM's CPU router takes the softmax of the bf16 top-k logits in bf16 (one bf16 rounding of each
        # weight, 2^-8 relative at most); the kernel computes it in fp32
        assert w1.dtype == torch.float32 and torch.allclose(w1, w2.float(), rtol=2 ** -8, atol=1e-6)
        if m > 16:
            assert torch.equal(w1, w2.float())
    snap = report.snapshot()["moe_route"]
    assert snap["installed"] == ["model.layers.0.mlp.experts"]
    assert snap["calls"] == {"fused": 1, "fallback:rows>16": 1}

    grouped = CPURouter(top_k=2, global_num_experts=8, use_grouped_topk=True, num_expert_group=2, topk_group=1)
    attach_routing(SimpleNamespace(router=grouped, _quant_method=None), "model.layers.1.mlp.experts")
    assert type(grouped) is CPURouter
    assert report.snapshot()["moe_route"]["kept"] == {"grouped top-k routing": ["model.layers.1.mlp.experts"]}


def _shared_mlp(cfg, hidden=128, inter=128):
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.linear import ReplicatedLinear
    from vllm.model_executor.models.qwen2_moe import Qwen2MoeMLP

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with set_current_vllm_config(cfg):
            gate = ReplicatedLinear(hidden, 1, bias=False, quant_config=None, prefix="model.layers.0.mlp.shared_expert_gate")
            return Qwen2MoeMLP(hidden, inter, "silu", reduce_results=False, expert_gate=gate,
                               prefix="model.layers.0.mlp.shared_expert")
    finally:
        torch.set_default_dtype(old)


def _load(m, g, on_grid: bool):
    from r9k.plugin.tiny_model import mxfp4_snap

    with torch.no_grad():
        for lin in (m.gate_up_proj, m.down_proj, m.expert_gate):
            w = torch.randn(lin.weight.shape, generator=g) * 0.08
            lin.weight.copy_(mxfp4_snap(w) if on_grid and lin is not m.expert_gate else w.to(torch.bfloat16))
            lin.quant_method.process_weights_after_loading(lin)


@pytest.mark.parametrize("on_grid", [True, False])
def test_shared_expert_runs_the_kernel_on_mxfp4_exact_weights_and_keeps_vllms_path_otherwise(
        active, vllm_ctx, seed, on_grid):
    from vllm.model_executor.models.qwen2_moe import Qwen2MoeMLP

    from r9k.plugin import report
    from r9k.plugin.layers.moe_runner import attach_shared_expert

    g = torch.Generator().manual_seed(seed)
    m = _shared_mlp(vllm_ctx)
    attach_shared_expert(m, "model.layers.0.mlp.shared_expert")
    assert type(m).__name__ == "R9kQwen2MoeMLP"
    _load(m, g, on_grid)
    x = torch.randn(4, 128, generator=g).to(torch.bfloat16)
    with torch.no_grad():
        out = m(x)
        ref = Qwen2MoeMLP.forward(m, x)  # vLLM's own forward on the same weights
    snap = report.snapshot()["shared_expert"]
    if not on_grid:
        assert torch.equal(out, ref)
        assert snap["installed"] == [] and list(snap["kept"]) == [
            "bf16 weights not on the MXFP4 grid (the kernel reads MXFP4; converting would round them)"]
        assert snap["calls"] == {"fallback:weights not MXFP4": 1}
        return
    # The weights convert exactly; what differs is the kernel's per-row fp8 (e4m3, 3 mantissa bits) quant of
    # x and of the activation: at most 2^-4 relative per element, averaging out over the 128-long dot
    # products. Bound: 8% of the output's RMS (measured: ~2-3%).
    err = (out.float() - ref.float()).pow(2).mean().sqrt() / ref.float().pow(2).mean().sqrt()
    assert 0 < err < 0.08, err
    assert snap["installed"] == ["model.layers.0.mlp.shared_expert"] and snap["calls"] == {"fused": 1}
    with torch.no_grad():
        big = torch.randn(20, 128, generator=g).to(torch.bfloat16)
        assert torch.equal(m(big), Qwen2MoeMLP.forward(m, big))  # above the fused rows: vLLM's path
    assert report.snapshot()["shared_expert"]["calls"] == {"fused": 1, "fallback:rows>16": 1}


def test_gate_linear_counts_fused_and_fallback_calls(active, vllm_ctx, seed):
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

    from r9k.plugin import report

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with set_current_vllm_config(vllm_ctx):
            layer = GateLinear(128, 8, prefix="model.layers.0.mlp.gate")
    finally:
        torch.set_default_dtype(old)
    layer(torch.randn(3, 128, dtype=torch.bfloat16))
    layer(torch.randn(17, 128, dtype=torch.bfloat16))
    snap = report.snapshot()["router_gemm"]
    assert snap["installed"] == ["model.layers.0.mlp.gate"]
    assert snap["calls"] == {"fused": 1, "fallback:rows>16": 1}
    layer2 = None
    try:
        with set_current_vllm_config(vllm_ctx):
            torch.set_default_dtype(torch.bfloat16)
            layer2 = GateLinear(128, 8, out_dtype=torch.float32, prefix="model.layers.1.mlp.gate")
    finally:
        torch.set_default_dtype(old)
    assert layer2._r9k_op is None
    kept = report.snapshot()["router_gemm"]["kept"]
    assert kept == {"router logits requested in torch.float32, the kernel writes bf16": ["model.layers.1.mlp.gate"]}


@pytest.mark.parametrize("reduce_results", [False, True])
def test_shared_expert_on_tp_shards_sums_to_the_whole_and_reduces_only_where_vllm_would(
        active, vllm_ctx, seed, monkeypatch, reduce_results):
    """At TP 2 each rank holds half of the intermediate (gate_up column-parallel, down row-parallel): the
    kernel computes that rank's partial ``sigmoid(x wg) * W2_r(act_r)``; the two partials add up to the
    whole expert, and the adapter all-reduces only where the module's own ``down_proj`` would
    (``reduce_results``; Qwen3-Next's MoE block passes False and sums shared + routed itself). Two shard
    modules in one process stand for the two ranks; the all-reduce is recorded, not run."""
    import vllm.distributed as dist
    from vllm.model_executor.models.qwen2_moe import Qwen2MoeMLP

    from r9k.plugin.layers.moe_runner import attach_shared_expert
    from r9k.plugin.tiny_model import mxfp4_snap

    calls = []
    monkeypatch.setattr(dist, "tensor_model_parallel_all_reduce", lambda t: calls.append(t.shape) or t)
    g = torch.Generator().manual_seed(seed)
    H, inter = 128, 128
    full = _shared_mlp(vllm_ctx, H, inter)
    for lin in (full.gate_up_proj, full.down_proj, full.expert_gate):
        lin._cpu_skip_gemm_dispatch = True  # plain weights, as the adapter keeps them (F.linear in vLLM's path)
    _load(full, g, on_grid=True)
    wgu, wd = full.gate_up_proj.weight.data, full.down_proj.weight.data
    x = torch.randn(4, H, generator=g).to(torch.bfloat16)
    parts = []
    for r in range(2):
        m = _shared_mlp(vllm_ctx, H, inter // 2)
        m.gate_up_proj.tp_size = m.down_proj.tp_size = 2
        m.down_proj.reduce_results = reduce_results
        half = slice(r * inter // 2, (r + 1) * inter // 2)
        with torch.no_grad():
            m.gate_up_proj.weight.copy_(torch.cat((wgu[:inter][half], wgu[inter:][half])))
            m.down_proj.weight.copy_(wd[:, half])
            m.expert_gate.weight.copy_(full.expert_gate.weight)
        assert torch.equal(m.down_proj.weight, mxfp4_snap(m.down_proj.weight.float()))
        attach_shared_expert(m, f"model.layers.{r}.mlp.shared_expert")
        assert type(m).__name__ == "R9kQwen2MoeMLP", "a shard is eligible"
        with torch.no_grad():
            parts.append(m(x))
    assert len(calls) == (2 if reduce_results else 0), calls
    with torch.no_grad():
        ref = Qwen2MoeMLP.forward(full, x)  # vLLM's whole expert on the same weights
    total = parts[0].float() + parts[1].float()
    # each rank quantizes its half of the activation on its own (fp8 a row): the same 8% RMS bound as above
    err = (total - ref.float()).pow(2).mean().sqrt() / ref.float().pow(2).mean().sqrt()
    assert err < 0.08, err
    one = (parts[0].float() - ref.float()).pow(2).mean().sqrt() / ref.float().pow(2).mean().sqrt()
    assert one > 0.2, "one rank's partial alone is not the whole expert"
