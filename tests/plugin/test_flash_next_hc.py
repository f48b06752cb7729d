"""The Flash-Next hyper-connection module: this project's fused path and vLLM's stock path against an
independent fp64 reference (transformers' own ``Qwen4ExpTextGatedResidual``, run in float64).

Both paths must agree with the reference within the rounding they do (bf16 GEMM outputs and one bf16 rounding
of each result); the fused path may not be worse than 1.5x the stock path's own error.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported (no GPU in CI)

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")
transformers = pytest.importorskip("transformers")


def _modules(hidden=256, hc=4, lora=32, seed=0):
    from transformers import Qwen4ExpTextConfig
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextGatedResidual
    from vllm.models.qwen4_exp.common.hyperconnection import HyperConnectionConfig

    from r9k.plugin.models.flash_next import FlashNextHyperConnection

    torch.manual_seed(seed)
    hcc = HyperConnectionConfig(hc_count=hc, hidden_size=hidden, params_dtype=torch.bfloat16, hc_lowrank=lora,
                                rms_norm_eps=1e-6, hc_per_branch_norm=True)
    ours = FlashNextHyperConnection(hcc, "model.layers.0.attn_hyper_connection")  # no dispatch table: stock
    dim = hc * hidden
    with torch.no_grad():
        ours.hc_norm.weight.copy_(torch.randn(dim) * 0.1)
        ours.input_mix_weight_down.weight.copy_(torch.randn(lora, dim) / dim ** 0.5)
        ours.input_mix_weight_up.weight.copy_(torch.randn(dim, lora) / lora ** 0.5)
        ours.block_inject_weight.weight.copy_(torch.randn(hc, dim) / dim ** 0.5)
    cfg = Qwen4ExpTextConfig(hidden_size=hidden, hc_count=hc, hc_lowrank=lora, rms_norm_eps=1e-6)
    ref = Qwen4ExpTextGatedResidual(cfg).double()
    ref.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    return ours, ref


def _fused(ours, impl):
    from r9k.kernels import ops
    from r9k.plugin.models import hc as hcmod

    from r9k.kernels.router import tl_common

    assert tl_common.INTERPRETED or torch.cuda.is_available(), "the Triton kernel would not run here"
    name = "hc_mix_fp8" if impl == "fp8" else "hc_mix"
    fn = ops.get(name).fused
    ours.path = hcmod.HcPath(ours.prefix, True, hcmod._torch_op(name, fn, ours.config.hc_lowrank, ours.hc_count),
                             name=name)
    ours.finish_loading()
    return ours


def _err(a, b):
    return (a.double() - b).abs().max().item()


@pytest.mark.parametrize("rows", [1, 4, 16, 24])
def test_fused_mix_and_combine_match_an_fp64_reference(rows):
    ours, ref = _modules()
    x = (torch.randn(rows, ours.hc_count * ours.hidden_size)).to(torch.bfloat16)
    blk = torch.randn(rows, ours.hidden_size).to(torch.bfloat16)
    with torch.no_grad():
        r_block, r_res, r_inj = ref(x.double())
        r_out = r_res + (blk.double().unsqueeze(-2) * r_inj.unsqueeze(-1)).flatten(-2)
        s_block, s_state = ours.mix(x)  # vLLM's GatedResidual
        s_out = ours.combine(blk, s_state)
        _fused(ours, "fused")
        f_block, f_state = ours.mix(x)
        f_out = ours.combine(blk, f_state)
    from r9k.plugin import counters
    assert counters.calls("hc_mix", "fused" if rows <= 16 else "fallback:rows>16") > 0
    e_stock, e_fused = _err(s_block, r_block), _err(f_block, r_block)
    scale = r_block.abs().max().item()
    assert e_stock < 2e-2 * scale, (e_stock, scale)  # bf16 GEMM outputs, a few roundings
    assert e_fused <= 1.5 * e_stock + 1e-6 * scale, (e_fused, e_stock)
    o_stock, o_fused = _err(s_out, r_out), _err(f_out, r_out)
    assert o_fused <= 1.5 * o_stock + 1e-3 * r_out.abs().max().item(), (o_fused, o_stock)


def test_a_wrong_fused_path_fails_this_check():
    """The check above can fail: a 1% error in the injected term is caught."""
    from r9k.kernels.decode_step import plain
    from r9k.plugin.models import hc as hcmod

    ours, ref = _modules(seed=3)
    x = torch.randn(4, ours.hc_count * ours.hidden_size).to(torch.bfloat16)
    blk = torch.randn(4, ours.hidden_size).to(torch.bfloat16)
    with torch.no_grad():
        r_block, r_res, r_inj = ref(x.double())
        r_out = r_res + (blk.double().unsqueeze(-2) * r_inj.unsqueeze(-1)).flatten(-2)
        _, s_state = ours.mix(x)
        o_stock = _err(ours.combine(blk, s_state), r_out)
        _fused(ours, "fused")
        _, f_state = ours.mix(x)
        res, inj = f_state
        good = plain.hc_combine(res, blk, inj, ours.hc_count)
        wrong = (res.double() + (good.double() - res.double()) * 1.01).to(torch.bfloat16)  # injection 1% off
        o_wrong = _err(wrong, r_out)
    assert o_wrong > 1.5 * o_stock + 1e-3 * r_out.abs().max().item(), (o_wrong, o_stock)
    assert hcmod.FUSED_MAX_M == 16


@pytest.mark.parametrize("rows", [1, 8, 20])
def test_fp8_path_matches_the_dequantized_fp64_reference(rows):
    """R9K_HC_FP8_DECODE's path (W8A16 on fp8 copies with per-row scales) against transformers' module run in
    fp64 on the exactly dequantized weights: relative L2 error of the block input < 1e-2 (bf16 roundings only;
    the original's gate allowed 2e-2)."""
    ours, ref = _modules(seed=5)
    x = torch.randn(rows, ours.hc_count * ours.hidden_size).to(torch.bfloat16)
    with torch.no_grad():
        _fused(ours, "fp8")
        f_block, _ = ours.mix(x)
        dq, ds, uq, us = ours._hc_weights
        L, hc = ours.config.hc_lowrank, ours.hc_count
        down = dq.double() * ds.double()[:, None]
        sd = ref.state_dict()
        sd["input_mix_weight_down.weight"] = down[:L]
        sd["block_inject_weight.weight"] = down[L: L + hc]
        sd["input_mix_weight_up.weight"] = uq.double() * us.double()[:, None]
        ref.load_state_dict(sd)
        r_block, _, _ = ref(x.double())
    rel = ((f_block.double() - r_block).norm() / r_block.norm()).item()
    assert rel < 1e-2, rel
    assert dq.dtype == torch.float8_e4m3fn and uq.dtype == torch.float8_e4m3fn
