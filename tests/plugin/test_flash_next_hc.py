"""The Flash-Next hyper-connection modules: every combination of this project's fused halves and vLLM's stock
path against an independent fp64 reference (transformers' own ``Qwen4ExpTextGatedResidual`` run in float64).

Two modules in a row, A then B (B folds A's block output in, as every module after the first does). Each
path's error against the reference must be within the rounding it does (bf16 GEMM outputs, a bf16 rounding of
each result): the fused paths may not be worse than 1.5x vLLM's own path's error (+ a small floor). A path
with a deliberate 1% error in the injected term fails the same check.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported (no GPU in CI)

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")
pytest.importorskip("transformers")

HIDDEN, HC, LORA = 256, 4, 32


def _pair(seed=0):
    """Modules A, B (ours, no dispatch table: vLLM's path) and their fp64 transformers twins."""
    from transformers import Qwen4ExpTextConfig
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextGatedResidual
    from vllm.models.qwen4_exp.common.hyperconnection import HyperConnectionConfig

    from r9k.plugin.models.flash_next import FlashNextHyperConnection

    torch.manual_seed(seed)
    hcc = HyperConnectionConfig(hc_count=HC, hidden_size=HIDDEN, params_dtype=torch.bfloat16, hc_lowrank=LORA,
                                rms_norm_eps=1e-6, hc_per_branch_norm=True)
    cfg = Qwen4ExpTextConfig(hidden_size=HIDDEN, hc_count=HC, hc_lowrank=LORA, rms_norm_eps=1e-6)
    out = []
    for name in ("A", "B"):
        ours = FlashNextHyperConnection(hcc, f"model.layers.0.{name}")
        dim = HC * HIDDEN
        with torch.no_grad():
            ours.hc_norm.weight.copy_(torch.randn(dim) * 0.1)
            ours.input_mix_weight_down.weight.copy_(torch.randn(LORA, dim) / dim ** 0.5)
            ours.input_mix_weight_up.weight.copy_(torch.randn(dim, LORA) / LORA ** 0.5)
            ours.block_inject_weight.weight.copy_(torch.randn(HC, dim) / dim ** 0.5)
        ref = Qwen4ExpTextGatedResidual(cfg).double()
        ref.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
        out.append((ours, ref))
    return out


def _set_ops(m, mix: str | None, combine_norm: bool):
    """Give module ``m`` the fused halves named (as the dispatch table would)."""
    from r9k.kernels import ops
    from r9k.kernels._triton import common

    from r9k.plugin.models import hc

    assert common.INTERPRETED or torch.cuda.is_available(), "the Triton kernels would not run here"
    o = hc.HcOps(m.prefix)
    if mix:
        o.mix_name, o.mix = mix, hc.mix_op(mix, ops.get(mix).fused, LORA, HC)
    if combine_norm:
        o.combine_norm = hc.combine_norm_op(ops.get(hc.COMBINE_NORM).fused, HC, 1e-6)
        if o.mix is None:
            o.mix_name, o.mix = "stock", hc.mix_op(hc.MIX, ops.get(hc.MIX).stock, LORA, HC, count=False)
    m.ops = o
    m.finish_loading()


def _run(pair, x, blk):
    from r9k.plugin.models.schedule import hc_module

    (a, _), (b, _) = pair
    with torch.no_grad():
        res, block_a, carry = hc_module(a, x)
        _, block_b, _ = hc_module(b, res, (blk, carry))
    return block_a, block_b


def _reference(pair, x, blk):
    (_, ra), (_, rb) = pair
    with torch.no_grad():
        block_a, res, inj = ra(x.double())
        folded = res + (blk.double().unsqueeze(-2) * inj.unsqueeze(-1)).flatten(-2)
        block_b, _, _ = rb(folded)
    return block_a, block_b


def _err(a, b):
    """Relative L2 error of ``a`` against the fp64 reference ``b``."""
    return ((a.double() - b).norm() / b.norm()).item()


PATHS = [("hc_mix", False), ("hc_mix", True), (None, True)]


@pytest.mark.parametrize("rows", [1, 4, 24])
@pytest.mark.parametrize("mix,combine_norm", PATHS)
def test_fused_halves_match_an_fp64_reference(rows, mix, combine_norm):
    from r9k.plugin import report

    pair = _pair()
    x = torch.randn(rows, HC * HIDDEN).to(torch.bfloat16)
    blk = torch.randn(rows, HIDDEN).to(torch.bfloat16)
    ref_a, ref_b = _reference(pair, x, blk)
    stock_a, stock_b = _run(pair, x, blk)  # vLLM's GatedResidual
    before = report.calls("hc_combine_norm")
    for m, _ in pair:
        _set_ops(m, mix, combine_norm)
    ours_a, ours_b = _run(pair, x, blk)
    for ours, stock, ref in ((ours_a, stock_a, ref_a), (ours_b, stock_b, ref_b)):
        e_stock, e_ours = _err(stock, ref), _err(ours, ref)
        assert e_stock < 1e-2, e_stock  # a few bf16 roundings (2**-9 each)
        assert e_ours <= 1.5 * e_stock + 5e-4, (e_ours, e_stock)
    if combine_norm:
        assert report.calls("hc_combine_norm") >= before + 2
    if mix:
        assert report.calls(mix, "fused" if rows <= 16 else "fallback:rows>16") > 0


def test_a_wrong_fold_fails_this_check():
    """The check can fail: module B folding A's output with a 1% error in the injected term is caught."""
    from r9k.plugin.models.schedule import hc_module
    from r9k.plugin.models import hc

    pair = _pair(seed=3)
    x = torch.randn(4, HC * HIDDEN).to(torch.bfloat16)
    blk = torch.randn(4, HIDDEN).to(torch.bfloat16)
    ref_a, ref_b = _reference(pair, x, blk)
    _, stock_b = _run(pair, x, blk)
    (a, _), (b, _) = pair
    for m, _ in pair:
        _set_ops(m, "hc_mix", False)
    with torch.no_grad():
        res, _, carry = hc_module(a, x)
        good = hc.fold(carry, res, blk)
        wrong = (res.double() + (good.double() - res.double()) * 1.01).to(torch.bfloat16)
        _, block_b, _ = hc_module(b, wrong)
    assert _err(block_b, ref_b) > 1.5 * _err(stock_b, ref_b) + 5e-4, (_err(block_b, ref_b), _err(stock_b, ref_b))


@pytest.mark.parametrize("rows", [1, 8, 20])
def test_fp8_mix_matches_the_dequantized_fp64_reference(rows):
    """R9K_HC_FP8_DECODE's mix (W8A16 on fp8 copies with per-row scales, after the fused combine + norm)
    against transformers' module in fp64 on the exactly dequantized weights: relative L2 error of the block
    input < 1e-2 (bf16 roundings only; the original's gate allowed 2e-2)."""
    from r9k.plugin.models.schedule import hc_module

    pair = _pair(seed=5)
    (a, ra), _ = pair
    x = torch.randn(rows, HC * HIDDEN).to(torch.bfloat16)
    _set_ops(a, "hc_mix_fp8", True)
    with torch.no_grad():
        block = hc_module(a, x)[1]
        dq, ds, uq, us = a._hc_weights
        down = dq.double() * ds.double()[:, None]
        sd = ra.state_dict()
        sd["input_mix_weight_down.weight"] = down[:LORA]
        sd["block_inject_weight.weight"] = down[LORA: LORA + HC]
        sd["input_mix_weight_up.weight"] = uq.double() * us.double()[:, None]
        ra.load_state_dict(sd)
        ref, _, _ = ra(x.double())
    rel = ((block.double() - ref).norm() / ref.norm()).item()
    assert rel < 1e-2, rel
    assert dq.dtype == torch.float8_e4m3fn and uq.dtype == torch.float8_e4m3fn


def _fp8_bytes(hidden: int, lora: int) -> int:
    """The bytes one module's fp8 copies take, as the Flash-Next model allocates them."""
    from vllm.models.qwen4_exp.common.hyperconnection import HyperConnectionConfig

    from r9k.kernels import ops
    from r9k.plugin.models import hc
    from r9k.plugin.models.flash_next import FlashNextHyperConnection

    hcc = HyperConnectionConfig(hc_count=4, hidden_size=hidden, params_dtype=torch.bfloat16, hc_lowrank=lora,
                                rms_norm_eps=1e-6, hc_per_branch_norm=True)
    m = FlashNextHyperConnection(hcc, "model.layers.0.attn_hyper_connection")
    bf16_before = sum(p.numel() * p.element_size() for p in m.parameters())
    m.ops = hc.HcOps(m.prefix, mix_name="hc_mix_fp8", mix=hc.mix_op("hc_mix_fp8", ops.get("hc_mix_fp8").fused, lora, 4))
    m.finish_loading()
    # the merged down+inject matrix is the loaded weights' own storage: the bf16 weights gain no byte
    assert sum(p.numel() * p.element_size() for p in m.parameters()) == bf16_before
    assert all(t.dtype in (torch.float8_e4m3fn, torch.float32) for t in m._hc_weights)
    return sum(t.numel() * t.element_size() for t in m._hc_weights)


def test_the_fp8_copies_the_model_allocates_are_what_the_registry_charges():
    """R9K_HC_FP8_DECODE's memory formula (the down copy, and the up copy where R9K_HC_FP8 does not hold it)
    against what the model allocates: the tiny checkpoint's 9 modules in the cpu-flash-next profile, and one
    module at the real model's dims (e4m3 down+inject [336, 10240], e4m3 up [10240, 320], fp32 row scales)."""
    from r9k.registry import load_registry
    from r9k.registry.memory import budget
    from r9k.registry.resolve import resolve

    reg = load_registry()
    b = budget(reg, resolve(reg, "cpu-flash-next"))
    charged = {c.knob: c.bytes for c in b.costs}["R9K_HC_FP8_DECODE"]
    assert charged == 9 * _fp8_bytes(256, 32) == 775_872, charged
    assert _fp8_bytes(2560, 320) == 336 * (10240 + 4) + 10240 * (320 + 4) == 6_759_744


def _trace_vllm_model(kinds):
    """What ``FlashNextModel.forward`` runs, at the schedule's level (as the decode step's trace: ``("hc",
    module index)``, ``("gdn"|"qsa", layer)``, ``("moe", layer)``): the model's own forward and layer
    forward over real hyper-connection modules (vLLM's path), with recording stand-ins for GDN, QSA and MoE."""
    from torch import nn
    from vllm.models.qwen4_exp.common.hyperconnection import HyperConnectionConfig

    from r9k.plugin.models import schedule
    from r9k.plugin.models import flash_next
    from r9k.plugin.models.checkpoint import GDN

    hcc = HyperConnectionConfig(hc_count=HC, hidden_size=HIDDEN, params_dtype=torch.bfloat16, hc_lowrank=LORA,
                                rms_norm_eps=1e-6, hc_per_branch_norm=True)
    log = []

    class Block(nn.Module):
        def __init__(self, name, i):
            super().__init__()
            self.name, self.i = name, i

        def forward(self, hidden_states, positions=None):
            log.append((self.name, self.i))
            return torch.tanh(hidden_states)

    class Layer(flash_next.FlashNextDecoderLayer):
        def __init__(self, i, kind):
            nn.Module.__init__(self)  # the modules a layer holds, without vLLM's config
            self.layer_type = kind
            if kind == GDN:
                self.linear_attn = Block("gdn", i)
            else:
                self.self_attn = Block("qsa", i)
                self.qsa_key = None  # as __init__ sets it for a config without an indexer: vLLM's attention path
            self.mlp = Block("moe", i)
            self.attn_hyper_connection = flash_next.FlashNextHyperConnection(hcc, f"l{i}.attn_hyper_connection")
            self.mlp_hyper_connection = flash_next.FlashNextHyperConnection(hcc, f"l{i}.mlp_hyper_connection")

    class Model(flash_next.FlashNextModel):
        def __init__(self):
            nn.Module.__init__(self)
            self.hc_count, self.start_layer, self.end_layer = HC, 0, len(kinds)
            self.layers = nn.ModuleList(Layer(i, k) for i, k in enumerate(kinds))
            self.hyper_connection_mixer = flash_next.FlashNextHyperConnection(hcc, "mixer", use_combine=False)

    model = Model()
    modules = [m for layer in model.layers for m in (layer.attn_hyper_connection, layer.mlp_hyper_connection)]
    modules.append(model.hyper_connection_mixer)
    real = schedule.hc_module

    def hc_module(mod, res, pending=None):
        log.append(("hc", next(i for i, m in enumerate(modules) if m is mod)))
        return real(mod, res, pending)

    x = torch.randn(3, HIDDEN).to(torch.bfloat16)
    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(schedule, "hc_module", hc_module)
        y = model(None, torch.arange(3), inputs_embeds=x)
    assert y.shape == (3, HIDDEN)
    return log


def test_the_vllm_model_and_the_decode_step_run_one_schedule():
    """The plugin's model and the decode-step benchmark, for the same layer kinds, run the same sequence of HC
    modules, token mixers and MoE, all HC modules through the shared ``schedule.hc_module``: the documented
    order (docs/semantics.md 2)."""
    from r9k.r9kctl.decode_step.config import TINY
    from evidence.test_decode_step import trace_decode_step
    from r9k.plugin.models.checkpoint import GDN

    assert TINY.layer_kinds() == ["gdn", "attn"]
    documented = [("hc", 0), ("gdn", 0), ("hc", 1), ("moe", 0), ("hc", 2), ("qsa", 1), ("hc", 3), ("moe", 1),
                  ("hc", 4)]
    assert _trace_vllm_model([GDN, "full_attention"]) == documented
    assert trace_decode_step() == documented


def test_the_bf16_mix_is_reported_superseded_by_the_fp8_mix_never_installed(plugin_env):
    """cpu-flash-next turns both mixes on; the fp8 one takes precedence in every module: the startup table, the
    model-built table, /r9k/status (merged_status) and its plan count say "superseded", not "installed"."""
    import r9k.plugin as plugin
    from r9k.plugin import report, dispatch
    from r9k.plugin.models import hc

    report.reset()
    lines: list[str] = []
    plugin_env.setenv("R9K_PROFILE", "cpu-flash-next")
    plugin_env.setattr(report, "emit", lambda level, line: lines.append(line))
    plugin.register()
    table = dispatch.get_table()
    head = next(ln for ln in lines if "variant(s) not at stock" in ln)
    fused = sum(p.state == "fused" for p in table.plans.values())
    assert f"{fused - 1} installed, 1 superseded" in head, head
    row = next(ln for ln in lines if " R9K_HC_MIX " in ln)
    assert "hc_decode_mix: superseded by hc_mix_fp8 wherever both run" in row, row

    names = [f"model.layers.{i}.attn_hyper_connection" for i in range(3)]
    for name in names:
        ops = hc.HcOps.choose(name, HC, LORA, 1e-6)
        assert ops.mix_name == hc.MIX_FP8
    snap = report.snapshot()
    assert snap["hc_mix"]["installed"] == [] and snap["hc_mix"]["kept"] == {"superseded by hc_mix_fp8": names}
    built = report.layers_table(report._active, snap, report._proc)
    assert any(ln.endswith("hc_decode_mix: superseded by hc_mix_fp8 in 3 layer(s)") for ln in built), built

    own = report.section(report._active, table, report._proc)
    merged = report.merged_status(own, None)
    assert merged["superseded"] == {"hc_decode_mix": "hc_decode_mix: superseded by hc_mix_fp8 in 3 layer(s)"}
    assert merged["in_use"]["hc_decode_mix"] == merged["superseded"]["hc_decode_mix"]
    assert merged["plan"]["installed"] == fused - 1 and merged["plan"]["superseded"] == 1
    assert "superseded" not in merged["in_use"]["hc_fp8_decode"]
    report.reset()
