"""Gate tests for the hyper-connection input mix, bf16 (3.1) and fp8 W8A16 (3.3) weights.

Gates (from the original's tests):
* down + hc_silu vs stock (PyTorch's own ops: ``F.linear`` and the torch hc_silu): bf16 values may
  differ only by summation-order flips: lora columns <= max(4, 0.5% of M*lora) flips, injection columns
  <= 1, zero rows exactly zero.
* gated mean (the op's block input, and the up+mix kernel alone from stock's lora) vs an fp64 reference
  of stock's semantics from the *same* lora: mean error <= 1.2x that of PyTorch's stock ops from that
  lora (+1e-6), elements beyond 2x stock's max error <= 1e-3 of all.
* above 16 rows (the stock sequence) the same gate, against the same independent references.
* other up+mix tiles: the same fp64 gate, each on its own (not one tile against another).
* fp8: against the exactly dequantised fp32 reference, which rounds at the same points: every element
  within one bf16 ulp, and at most max(4, 1%) of them differ (fp32 summation order flips a rounding; a
  1% error in one term moves most elements by more than an ulp); a second launch gives the same bits.
CPU: interpreter at a small geometry (4 streams of 96, lora 40, 48 down rows: tails everywhere);
GPU (``-m gpu``): the real one (4 x 2560, lora 320, 336 down rows).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .._testing import assert_written, bf16_flips, bf16_ulp, randn, rel_l2

from . import reference as ref
from . import triton_kernel as tk

SMALL = dict(HD=96, R=40, ND=48)
REAL = dict(HD=2560, R=320, ND=336)


def _need_triton(device):
    if not (device == "cuda" or tk.INTERPRETED):
        pytest.skip("no Triton platform: no CUDA device and TRITON_INTERPRET was not set at import")


def _inputs(M, HD, R, ND, gen, device, strided=False):
    cols = 4 * HD
    xb = randn((M, cols + (128 if strided else 0)), gen, device)
    xn = xb[:, :cols]
    w_down = randn((ND, cols), gen, device, scale=cols ** -0.5 * 4)
    w_down[R + 4:] = 0.0  # the zero padding rows of the merged down+inject weight
    w_up = randn((cols, R), gen, device, scale=R ** -0.5 * 2)
    return xn, w_down, w_up


def _outs(M, HD, ND, device, poison):
    return (poison(torch.empty((M, ND), dtype=torch.bfloat16, device=device)),
            poison(torch.empty((M, HD), dtype=torch.bfloat16, device=device)))


def _mix_errors(y, ref64):
    err = (y.double() - ref64).abs()
    return err.mean().item(), err


def _torch_stock(xn, wd, wu, R):
    """The stock sequence from PyTorch's own ops only (no Triton, none of this module's kernels)."""
    buf = ref.hc_silu_torch_(F.linear(xn, wd), R)
    return buf, ref.hc_gate_mix_torch(xn, F.linear(buf[:, :R], wu))


def _check_mix(y, xn, lora, wu):
    """Gated mean ``y`` vs fp64 from the same lora, against PyTorch's stock error from that lora."""
    r64 = ref.mix_fp64(xn, lora, wu)
    stock = ref.hc_gate_mix_torch(xn, F.linear(lora, wu))
    mo, eo = _mix_errors(y, r64)
    ms, es = _mix_errors(stock, r64)
    assert mo <= 1.2 * ms + 1e-6, (mo, ms)
    assert int((eo > 2 * es.max()).sum()) <= 1e-3 * eo.numel()


def _check_bf16(M, g, device, gen, poison, strided=False):
    xn, wd, wu = _inputs(M, g["HD"], g["R"], g["ND"], gen, device, strided)
    R = g["R"]
    ob, oy = _outs(M, g["HD"], g["ND"], device, poison)
    buf, y = tk.hc_mix(xn, wd, wu, ob, oy, lora_rank=R)
    assert buf.data_ptr() == ob.data_ptr() and y.data_ptr() == oy.data_ptr()
    assert_written(buf, "buf")
    assert_written(y, "block_input")
    sbuf, _ = _torch_stock(xn, wd, wu, R)
    # down + hc_silu: summation-order flips only
    assert bf16_flips(buf[:, :R], sbuf[:, :R]) <= max(4, int(0.005 * M * R))
    assert bf16_flips(buf[:, R:R + 4], sbuf[:, R:R + 4]) <= 1
    assert torch.equal(buf[:, R + 4:], sbuf[:, R + 4:])  # zero rows stay exactly zero
    # gated mean: the op's own output from its own lora, and (where it runs: one 16-row tile) the up+mix
    # kernel from stock's lora
    _check_mix(y, xn, buf[:, :R], wu)
    if M <= tk.MAX_M:
        _check_mix(tk._up_mix(sbuf[:, :R], wu, None, xn, None, 4), xn, sbuf[:, :R], wu)
    return xn, wd, wu


def _within_rounding(a, b, what, max_share=0.01, slack=None):
    """a and b round at the same points: every element within one bf16 ulp of b (plus ``slack``, what an
    input's allowed rounding flip can move it), and at most max(4, max_share) of them differ (a
    summation-order difference flips a rounding now and then)."""
    d = (a.double() - b.double()).abs()
    bound = bf16_ulp(b) + (slack if slack is not None else 0)
    far = int((d > bound * (1 + 1e-6)).sum())
    assert far == 0, f"{what}: {far} of {a.numel()} elements beyond one bf16 ulp of the reference"
    flips = bf16_flips(a, b)
    assert flips <= max(4, int(max_share * a.numel())), f"{what}: {flips} of {a.numel()} elements differ"


def _gate_flip_slack(xn, gate, hc=4):
    """What a one-ulp flip of each bf16 gate (the kernel's fp32 dot and the reference's matmul sum in other
    orders) can move the block input: mean over the streams of ulp(g) * max sigmoid'(1/4) * |xn|. Where the
    four terms nearly cancel this is more than one ulp of the small result."""
    M = xn.shape[0]
    t = bf16_ulp(gate).view(M, hc, -1) * 0.25 * xn.double().abs().view(M, hc, -1)
    return t.sum(1) / hc


def _silu_flip_slack(xn, down_q, down_s, R, hc=4):
    """What a one-ulp flip of each bf16 down-GEMM output (the kernel and the reference sum in other orders,
    then both round before hc_silu) can move the lora columns: ``|d hc_silu/dv| * ulp(v)``, with
    ``hc_silu(v) = (v/hc) sigmoid(v/hc)``; zero on the injection columns (no activation there). Near
    hc_silu's zero that is more than one ulp of the small result (seed 1001 found such an element)."""
    pre = (xn.float() @ (down_q.float() * down_s[:, None]).t()).to(torch.bfloat16)[:, :R + 4]
    a = pre.double() / hc
    sg = torch.sigmoid(a)
    deriv = (sg + a * sg * (1 - sg)).abs() / hc
    slack = deriv * bf16_ulp(pre)
    slack[:, R:] = 0
    return slack


def _check_fp8(M, g, device, gen, poison, strided=False):
    xn, wd, wu = _inputs(M, g["HD"], g["R"], g["ND"], gen, device, strided)
    R = g["R"]
    p = tk.prepare_hc_fp8(wd, wu)
    assert tk.hc_fp8_bytes(*p) == wd.numel() + wu.numel() + 4 * (wd.shape[0] + wu.shape[0])
    ob, oy = _outs(M, g["HD"], g["ND"], device, poison)
    buf, y = tk.hc_mix_fp8(xn, *p, ob, oy, lora_rank=R)
    assert_written(buf, "buf")
    assert_written(y, "block_input")
    rbuf, ry = ref.hc_fp8_dequant_ref(xn, *p, lora_rank=R)
    _within_rounding(buf[:, :R + 4], rbuf[:, :R + 4], "lora + injection", slack=_silu_flip_slack(xn, p[0], p[1], R))
    # the block input from the op's own lora (a lora flip is not a mix error)
    wu_deq = p[2].float() * p[3][:, None]
    gate = (buf[:, :R].float() @ wu_deq.t()).to(torch.bfloat16)
    _within_rounding(y, ref.hc_gate_mix_torch(xn, gate), "block input", slack=_gate_flip_slack(xn, gate))
    buf2, y2 = tk.hc_mix_fp8(xn, *p, lora_rank=R)
    assert torch.equal(buf, buf2) and torch.equal(y, y2), "a second launch gave other bits"
    return rel_l2(y, ry)


@pytest.mark.parametrize("M,strided", [(1, False), (3, False), (4, False), (5, True), (8, False), (16, False)])
def test_hc_mix_gate_interpreter(M, strided, device, rng, poison):
    _need_triton(device)
    _check_bf16(M, SMALL, device, rng, poison, strided)


def test_hc_mix_above_16_is_stock_interpreter(device, rng, poison):
    """Above 16 rows the op runs the stock sequence: gated like the fused path, against PyTorch's own ops
    and fp64 (not against this module's stock function, which is what it calls)."""
    _need_triton(device)
    for M in (17, 24):
        _check_bf16(M, SMALL, device, rng, poison)


@pytest.mark.parametrize("config", [(16, 16, 4, 2, 1), (32, 32, 2, 3, 1), (16, 64, 4, 3), (16, 64, 4, 3, 1)])
def test_up_mix_configs_interpreter(config, device, rng, poison):
    """Other up+mix tiles (unrolled and rolled, lora tails), each against fp64 and PyTorch's stock ops."""
    _need_triton(device)
    xn, wd, wu = _inputs(6, SMALL["HD"], SMALL["R"], SMALL["ND"], rng, device)
    lora = randn((6, SMALL["R"]), rng, device)
    out = poison(torch.empty((6, SMALL["HD"]), dtype=torch.bfloat16, device=device))
    y = tk._up_mix(lora, wu, None, xn, out, 4, config=config)
    assert_written(y)
    _check_mix(y, xn, lora, wu)


@pytest.mark.parametrize("M,strided", [(1, False), (4, True), (13, False), (16, False)])
def test_hc_mix_fp8_gate_interpreter(M, strided, device, rng, poison):
    _need_triton(device)
    _check_fp8(M, SMALL, device, rng, poison, strided)


@pytest.mark.gpu
@pytest.mark.parametrize("M,strided", [(1, False), (3, False), (4, False), (5, True), (8, False), (13, False),
                                       (16, False)])
def test_hc_mix_gate_gpu(M, strided, rng, poison):
    _check_bf16(M, REAL, "cuda", rng, poison, strided)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [17, 64])
def test_hc_mix_above_16_is_stock_gpu(M, rng, poison):
    _check_bf16(M, REAL, "cuda", rng, poison)


@pytest.mark.gpu
@pytest.mark.parametrize("M,strided", [(1, False), (2, False), (4, True), (8, False), (13, False), (16, False)])
def test_hc_mix_fp8_gate_gpu(M, strided, rng, poison):
    _check_fp8(M, REAL, "cuda", rng, poison, strided)
