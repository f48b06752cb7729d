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
* fp8: every output element is the bf16 rounding of a value the kernel's formula can give from the fp64
  evaluation of its exact inputs within a derived fp32 error bound (:func:`_dot_range`, :func:`_silu_range`,
  :func:`_mix_range`: the GPU sums in another order, contracts to FMA, uses approximate exp/divide), so an
  element differs from the rounding of the exact value only where that lies within the bound of a bf16
  rounding boundary; at most max(4, 1%) of them differ from the fp32 reference, which rounds at the same
  points (a 1% error in one term moves most elements); a second launch gives the same bits; the stock
  reference (``reference.hc_mix_fp8``) meets the same derived bounds.
CPU: interpreter at a small geometry (4 streams of 96, lora 40, 48 down rows: tails everywhere);
GPU (``-m gpu``): the real one (4 x 2560, lora 320, 336 down rows).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from .._testing import assert_written, bf16_flips, randn, rel_l2

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


U32 = 2.0 ** -24  # fp32 unit roundoff: one rounding to nearest
EPS32 = 2.0 ** -23  # fp32 machine epsilon: one rounding in any mode (nearest, toward zero)
U64 = 2.0 ** -53  # fp64 unit roundoff (the exact references' own error)
SILU_ARGMIN = -1.2784645427610738  # where silu(a) = a sigmoid(a) is least: 1 + a (1 - sigmoid(a)) = 0


def _gamma(n, u):
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of n successive roundings of unit u."""
    return n * u / (1 - n * u)


def _rn_bf16(v):
    """fp64 -> the nearest bf16 value (ties to even), as fp64, without double rounding through fp32 (what
    ``.to(torch.bfloat16)`` of an fp64 tensor does); subnormals on bf16's 2^-133 grid. Rounding is monotone, so
    the bf16 values that a rounding of any real in [lo, hi] gives are exactly those in [rn(lo), rn(hi)]."""
    _, e = torch.frexp(v)  # v = m 2^e, 0.5 <= |m| < 1: bf16's 8 significant bits are multiples of 2^(e-8)
    q = torch.exp2((e - 8).clamp_min(-133).to(v.dtype))
    return torch.round(v / q) * q  # v / q exact (a power of two); torch.round: half to even


def _dot_range(a, q, s):
    """(lo, hi) fp64 [M, N]: where the kernel's fp32 ``s_n * sum_k a_mk q_nk`` can lie, before its bf16 rounding.

    ``a`` is bf16 and ``q`` e4m3 codes, exact in bf16, so every product is exact in fp32 (16 significant bits);
    fp64 gives the exact sum up to ``gamma_{K+2}(2^-53) A`` (the matmul, the scale), ``A = s_n sum_k |a q|``.
    The kernel's sum commits at most one rounding per term added into an accumulator, in any order or grouping
    (its split-K partials, tensor-core MMA steps, FMA contraction), each of at most ``2^-23`` times the magnitude
    of a partial sum of |terms| (round to nearest: 2^-24; toward zero, as MMA units align and truncate: 2^-23),
    and the scale multiply one more: ``|error| <= gamma_{K+1}(2^-23) A`` (Higham 2002, 3.1 / 4.2; Fasi et al.
    2021 for the tensor cores). The bound comes from the actual inputs; it is wide (about 2^-13 A at K = 10240)
    and grows where the sum cancels, where one bf16 ulp of the small result is tiny.
    """
    a64, q64, s64 = a.double(), q.double(), s.double()[None, :]
    v = (a64 @ q64.t()) * s64
    big = (a64.abs() @ q64.abs().t()) * s64.abs()
    K = a.shape[1]
    e = (_gamma(K + 1, EPS32) + _gamma(K + 2, U64)) * big
    return v - e, v + e


def _silu_range(lo, hi, hc=4):
    """(lo, hi) fp64: the kernel's fp32 ``hc_silu(b) = (b/hc) / (1 + exp(-b/hc))`` over bf16 inputs b in
    [lo, hi]. The exact silu's extremes on the interval (at its ends, and at silu's minimum where inside), widened
    by the kernel's evaluation error: ``b / 4`` exact; ``exp(-a)`` as ``ex2(-a log2 e)``, the argument's rounding
    ``|a| u`` relative plus 2 ulp (4u) of ex2; ``1 + e``: u; the divide: 2 ulp (4u, ``div.full.f32``):
    ``gamma_{|a|+9}(2^-24)`` relative, plus 2^-126 absolute (a flushed subnormal)."""
    al, ah = lo / hc, hi / hc
    am = torch.minimum(torch.maximum(torch.full_like(al, SILU_ARGMIN), al), ah)
    f = torch.stack([a * torch.sigmoid(a) for a in (al, ah, am)])
    fmin, fmax = f.min(0).values, f.max(0).values
    n = torch.maximum(al.abs(), ah.abs()) + 9
    e = _gamma(n, U32) * torch.maximum(fmin.abs(), fmax.abs()) + 2.0 ** -126
    return fmin - e, fmax + e


def _mix_range(xn, glo, ghi, hc=4):
    """(lo, hi) fp64 [M, HD]: the kernel's fp32 ``0.25 * sum_s sigmoid(g_s) xn_s`` over bf16 gates g_s in
    [glo, ghi] (sigmoid is increasing: each term's extremes are at the ends). Each term's evaluation error:
    ``1 / (1 + exp(-g))`` as for hc_silu, ``gamma_{|g|+9}``, and the product with xn: u; the three additions in any
    order or with FMA: ``gamma_3 sum |t|``; the 1/4 exact."""
    M = xn.shape[0]
    x = xn.double().view(M, hc, -1)
    sl, sh = torch.sigmoid(glo.view(M, hc, -1)), torch.sigmoid(ghi.view(M, hc, -1))
    tl_, th = torch.minimum(sl * x, sh * x), torch.maximum(sl * x, sh * x)
    tmax = torch.maximum(tl_.abs(), th.abs())
    n = torch.maximum(glo.abs(), ghi.abs()).view(M, hc, -1) + 10
    e = (_gamma(n, U32) * tmax).sum(1) + _gamma(3, U32) * tmax.sum(1)
    return (tl_.sum(1) - e) / hc, (th.sum(1) + e) / hc


def _in_range(out, lo, hi, what):
    """Every bf16 element of ``out`` is the rounding of some value in [lo, hi] (fp64): rn(lo) <= out <= rn(hi)."""
    o = out.double()
    far = (o < _rn_bf16(lo)) | (o > _rn_bf16(hi))
    n = int(far.sum())
    assert n == 0, (f"{what}: {n} of {out.numel()} elements are not a bf16 rounding of a value within the derived "
                    f"fp32 bound of the exact one (first at {far.nonzero()[0].tolist()})")


def _few_flips(a, b, what, max_share=0.01):
    """a and b round at the same points: at most max(4, max_share) of their bf16 values differ (a summation-order
    difference flips a rounding now and then; a 1% error in a term moves most elements)."""
    flips = bf16_flips(a, b)
    assert flips <= max(4, int(max_share * a.numel())), f"{what}: {flips} of {a.numel()} elements differ"


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
    # down GEMM: the injection columns and zero rows as rounded, the lora columns through hc_silu
    lo, hi = (_rn_bf16(b) for b in _dot_range(xn, p[0], p[1]))
    slo, shi = _silu_range(lo[:, :R], hi[:, :R])
    _in_range(buf[:, :R], slo, shi, "lora")
    _in_range(buf[:, R:], lo[:, R:], hi[:, R:], "injection + zero rows")
    _few_flips(buf[:, :R + 4], rbuf[:, :R + 4], "lora + injection")
    # the block input from the op's own lora (a lora flip is not a mix error)
    glo, ghi = (_rn_bf16(b) for b in _dot_range(buf[:, :R], p[2], p[3]))
    _in_range(y, *_mix_range(xn, glo, ghi), "block input")
    wu_deq = p[2].float() * p[3][:, None]
    gate = (buf[:, :R].float() @ wu_deq.t()).to(torch.bfloat16)
    _few_flips(y, ref.hc_gate_mix_torch(xn, gate), "block input")
    buf2, y2 = tk.hc_mix_fp8(xn, *p, lora_rank=R)
    assert torch.equal(buf, buf2) and torch.equal(y, y2), "a second launch gave other bits"
    # The stock reference (ref.hc_mix_fp8, the op's stock path) meets the same derived bounds, its block input
    # from its own lora: a wrong stock path fails here instead of going unseen (the gate compares the fused
    # kernel with the fp32 dequant reference, not with the stock function)
    sbuf, sy = ref.hc_mix_fp8(xn, *p, lora_rank=R)
    _in_range(sbuf[:, :R], slo, shi, "stock reference: lora")
    _in_range(sbuf[:, R:], lo[:, R:], hi[:, R:], "stock reference: injection + zero rows")
    sglo, sghi = (_rn_bf16(b) for b in _dot_range(sbuf[:, :R], p[2], p[3]))
    _in_range(sy, *_mix_range(xn, sglo, sghi), "stock reference: block input")
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
