"""Block-fp8 linears (r9k.plugin.quant): the checkpoint check (one located line naming the tensor, before any
weight is read), and vLLM's own linear classes built with this project's quantization method: loaded through
vLLM's weight loaders from checkpoint-format tensors, the stock path (dequantize + matmul), this project's
block GEMM and its one-launch activation quant, against the plain-PyTorch reference of the format
(``r9k.kernels.fp8_block.reference``); the counters move only on the project's paths.
The served model: tests/plugin/test_e2e_flash_next.py."""
from __future__ import annotations

import json
import os

import pytest

from r9k.registry import envvars

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("vllm")


def _write(tmp_path, tensors: dict, block=(128, 128)):
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen4ExpForCausalLM"],
        "quantization_config": {"quant_method": "fp8", "weight_block_size": list(block)}}))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


def _fp8(n, k, seed=0):
    from r9k.plugin.quant import quantize_block_fp8

    g = torch.Generator().manual_seed(seed)
    return quantize_block_fp8(torch.randn(n, k, generator=g) * 0.05)


def test_quantize_block_fp8_is_the_checkpoint_format():
    from r9k.kernels.fp8_block import reference
    from r9k.plugin.quant import dequant_linear, quantize_block_fp8

    w = torch.randn(300, 256) * 0.05
    q, s = quantize_block_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (300, 256) and s.shape == (3, 2) and s.dtype == torch.float32
    # dequantized: within e4m3's half-ulp (2^-4 relative) of each block's values
    deq = q.float() * s.repeat_interleave(128, 0)[:300].repeat_interleave(128, 1)
    assert torch.allclose(deq, w, rtol=2 ** -4, atol=s.max().item() * 2 ** -9)
    x = (torch.randn(5, 256) * 0.5).to(torch.bfloat16)
    assert torch.allclose(dequant_linear(x, q, s).float(), x.float() @ deq.T, rtol=2e-2, atol=2e-2)
    # the project's reference of the format agrees with the stock path within the activation quant's rounding
    ref = reference.fp8_block_linear(x, q, s).float()
    assert (ref - dequant_linear(x, q, s).float()).abs().max() <= 0.05 * ref.abs().max()


def test_a_sound_checkpoint_passes_and_each_fault_is_one_line_naming_the_tensor(tmp_path):
    from r9k.plugin.models.checkpoint import precheck
    from r9k.plugin.quant import check_checkpoint

    q, s = _fp8(256, 256)
    base = "model.layers.0.self_attn.o_proj"
    good = {f"{base}.weight": q, f"{base}.weight_scale_inv": s,
            "model.layers.0.mlp.gate.weight": torch.zeros(8, 256, dtype=torch.bfloat16)}
    (tmp_path / "good").mkdir()
    assert check_checkpoint(str(_write(tmp_path / "good", good))) is None

    cases = {
        "missing": ({f"{base}.weight": q}, f"{base}.weight_scale_inv: missing"),
        "shape": ({f"{base}.weight": q, f"{base}.weight_scale_inv": s[:1].contiguous()},
                  f"{base}.weight_scale_inv: shape [1, 2] does not match {base}.weight [256, 256]"),
        "dtype": ({f"{base}.weight": q, f"{base}.weight_scale_inv": s.to(torch.bfloat16)},
                  f"{base}.weight_scale_inv: dtype BF16"),
        "wrong-layer": ({"model.layers.0.mlp.gate.weight": q}, "model.layers.0.mlp.gate.weight: float8_e4m3"),
    }
    for name, (tensors, expected) in cases.items():
        d = tmp_path / name
        d.mkdir()
        _write(d, tensors)
        fault = check_checkpoint(str(d))
        assert fault is not None and expected in str(fault), (name, fault)
        line = str(fault)
        assert "\n" not in line and line.startswith(str(d / "model.safetensors") + ": error[bad-checkpoint]: "), line
    d = tmp_path / "block"
    d.mkdir()
    _write(d, good, block=(64, 64))
    assert "weight_block_size: [64, 64]" in str(check_checkpoint(str(d)))
    # r9kctl launch's precheck (the Flash-Next architecture) says the same, as its one line
    d = tmp_path / "missing"
    cfg = json.loads((d / "config.json").read_text())
    from r9k.plugin.models import tiny_flash_next

    cfg.update(tiny_flash_next.CONFIG)
    (d / "config.json").write_text(json.dumps(cfg))
    err = precheck(str(d), 512)
    assert err is not None and err.file == str(d / "model.safetensors") and f"{base}.weight_scale_inv: missing" in str(err)


@pytest.fixture
def flash_next(plugin_env):
    """The plugin registered for cpu-flash-next (block GEMM and fused activation quant on), fresh counters."""
    import r9k.plugin as plugin
    from r9k.plugin import report

    report.reset()
    plugin_env.setenv(envvars.PROFILE.name, "cpu-flash-next")
    plugin_env.setattr(report, "emit", lambda level, line: None)
    yield plugin_env
    report.reset()


def _linears(prefix_kind: str):
    """A vLLM QKVParallelLinear (merged: q, k, v shards) and a RowParallelLinear with the block-fp8 method,
    loaded through vLLM's weight loaders from checkpoint-format tensors; returns (layers, dequantized weights)."""
    from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear

    from r9k.plugin import quant

    cfg = quant._config_class()([128, 128])
    qkv = QKVParallelLinear(256, 64, 4, 4, bias=False, quant_config=cfg, prefix=f"{prefix_kind}.qkv_proj",
                            params_dtype=torch.bfloat16)
    o = RowParallelLinear(256, 256, bias=False, quant_config=cfg, prefix=f"{prefix_kind}.o_proj",
                          params_dtype=torch.bfloat16)
    dq = {}
    for i, shard in enumerate(("q", "k", "v")):
        w, s = _fp8(256, 256, seed=i + 1)
        qkv.weight.weight_loader(qkv.weight, w, shard)
        qkv.weight_scale_inv.weight_loader(qkv.weight_scale_inv, s, shard)
        dq[shard] = w.float() * s.repeat_interleave(128, 0).repeat_interleave(128, 1)
    w, s = _fp8(256, 256, seed=9)
    o.weight.weight_loader(o.weight, w)
    o.weight_scale_inv.weight_loader(o.weight_scale_inv, s)
    dq["o"] = w.float() * s.repeat_interleave(128, 0).repeat_interleave(128, 1)
    for layer in (qkv, o):
        layer.quant_method.process_weights_after_loading(layer)
    return qkv, o, dq


@pytest.mark.parametrize("sets, gemm, qa", [
    ({"R9K_FP8_BLOCK": "", "R9K_FP8_QA": "0"}, False, False),
    ({"R9K_FP8_QA": "0"}, True, False),
    ({}, True, True),
])
def test_vllm_linears_serve_the_checkpoint_format_on_each_path(flash_next, vllm_ctx, seed, sets, gemm, qa):
    import r9k.plugin as plugin
    from r9k.kernels.fp8_block import reference
    from r9k.plugin import report

    for k, v in sets.items():
        flash_next.setenv(k, v)
    plugin.register()
    qkv, o, dq = _linears("model.layers.3.self_attn")
    assert type(qkv.quant_method).__name__ == "R9kBlockFp8LinearMethod"
    assert qkv.weight.dtype == torch.float8_e4m3fn and qkv.weight_scale_inv.shape == (6, 2)
    g = torch.Generator().manual_seed(seed)
    for m in (3, 20):  # 20 rows: above the one-launch path's 16
        x = (torch.randn(m, 256, generator=g) * 0.5).to(torch.bfloat16)
        y, _ = qkv(x)
        exact = x.float() @ torch.cat([dq["q"], dq["k"], dq["v"]]).T
        if gemm:  # this project's GEMM: the format's reference (activation quant per row and 128-group), bit-exact
            assert torch.equal(y, reference.fp8_block_linear(x, qkv.weight, qkv.weight_scale_inv))
        else:  # stock: dequantize + matmul, bf16 weights
            assert torch.allclose(y.float(), exact, rtol=1e-2, atol=1e-2 * exact.abs().max().item())
        assert (y.float() - exact).abs().max() <= 0.05 * exact.abs().max()
        z, _ = o(x)
        exact_o = x.float() @ dq["o"].T
        assert z.shape == (m, 256) and (z.float() - exact_o).abs().max() <= 0.05 * exact_o.abs().max()
    snap = report.snapshot()
    if not gemm:
        assert snap.get("fp8_block_gemm", {}).get("calls", {}) == {}
        return
    assert snap["fp8_block_gemm"]["installed"] == ["model.layers.3.self_attn.qkv_proj", "model.layers.3.self_attn.o_proj"]
    assert snap["fp8_block_gemm"]["calls"] == {"fused": 4}
    if qa:
        assert snap["fp8_block_linear"]["calls"] == {"fused": 2, "fallback:rows>16": 2}
    else:
        assert not snap.get("fp8_block_linear", {}).get("calls")


def test_only_the_checkpoints_fp8_linears_get_the_method(flash_next, vllm_ctx):
    import r9k.plugin as plugin
    from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod

    from r9k.plugin import quant

    plugin.register()
    cfg = quant._config_class()([128, 128])
    gate = ReplicatedLinear(256, 8, bias=False, quant_config=cfg, prefix="model.layers.0.mlp.gate",
                            params_dtype=torch.bfloat16)
    assert isinstance(gate.quant_method, UnquantizedLinearMethod)
    assert cfg.get_quant_method(torch.nn.Module(), "model.layers.0.mlp.experts") is None
    # vLLM picks this method for a block-fp8 checkpoint on the CPU backend (its own fp8 has no CPU kernel)
    assert quant._config_class().override_quantization_method(
        {"quant_method": "fp8", "weight_block_size": [128, 128]}, None) == quant.NAME
    assert quant._config_class().override_quantization_method({"quant_method": "awq"}, None) is None
