"""Gate of R9K_QSA_GLUE (docs/semantics.md 3.7): the fused norm + rope rounds where the stock ops round; the only
fp32 difference is the norm's (sum of squares order, rsqrt and division instructions), which may move a normed
value to the adjacent bf16 value where its exact value lies within the derived bound of a rounding boundary
(:func:`_normed_range`); the output is the stock rope of normed values within that range (:func:`_check`),
element by element, with no quota of flips (how many exact values lie near a boundary is the inputs' business); the stock
reference's output lies in the same range. CPU (Triton interpreter) at small shapes; the real indexer shapes
on a GPU."""
from __future__ import annotations

import itertools

import pytest
import torch

from ..ops import triton_platform
from . import reference, triton_kernel

needs_triton = pytest.mark.skipif(triton_platform() is None,
                                  reason="no Triton backend: needs a GPU or TRITON_INTERPRET=1 (kernels/conftest.py)")
gpu = pytest.mark.gpu  # skipped with its reason by kernels/conftest.py where no CUDA device is visible

THETA = 10000.0


def _dev():
    return "cuda" if torch.cuda.is_available() else "cpu"


_counter = itertools.count()


def _case(seed, T, H, D, R2, pos_kind, strided=True, sections=None, interleaved=True, pos_stride=3,
          equal_rows=False, max_pos=8192):
    """One random case from this test's fresh seed (the counter makes each case of a test distinct)."""
    seed = seed + 7919 * next(_counter)
    g = torch.Generator(device="cpu").manual_seed(seed)
    dev = _dev()
    scale = torch.rand(T, 1, 1, generator=g) * 4 + 0.05  # rows of different magnitude
    if strided:  # q as a view of the projection row [q: H x D | k: D]
        row = (torch.randn(T, (H + 1) * D, generator=g) * scale.view(T, 1)).to(torch.bfloat16).to(dev)
        x = row[:, : H * D].view(T, H, D)
    else:
        x = (torch.randn(T, H, D, generator=g) * scale).to(torch.bfloat16).to(dev)
    w = (torch.randn(D, generator=g) * 0.3).to(torch.bfloat16).to(dev)
    cache = reference.rope_cos_sin_cache(R2, max_pos, THETA).to(dev) if pos_kind else None
    pos = None
    if pos_kind == "1d":  # a strided column of a [T, pos_stride] buffer, as serving hands it over
        buf = torch.randint(0, max_pos, (T, pos_stride), generator=g).to(dev)
        pos = buf[:, 0]
    elif pos_kind == "mrope":
        buf = torch.randint(0, max_pos, (3, T * pos_stride), generator=g).to(dev)
        if equal_rows:
            buf[1] = buf[0]
            buf[2] = buf[0]
        pos = buf[:, ::pos_stride]
    return dict(x=x, weight=w, positions=pos, cos_sin_cache=cache, eps=1e-6, mrope_section=sections,
                mrope_interleaved=interleaved), seed


U32 = 2.0 ** -24  # fp32 unit roundoff (round to nearest)


def _gamma(n, u=U32):
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of n successive roundings."""
    return n * u / (1 - n * u)


def _rn_bf16(v):
    """fp64 -> the nearest bf16 value (ties to even), as fp64, without double rounding through fp32 (what
    ``.to(torch.bfloat16)`` of an fp64 tensor does); subnormals on bf16's 2^-133 grid."""
    _, e = torch.frexp(v)  # v = m 2^e, 0.5 <= |m| < 1: bf16's 8 significant bits are multiples of 2^(e-8)
    q = torch.exp2((e - 8).clamp_min(-133).to(v.dtype))
    return torch.round(v / q) * q  # v / q exact (a power of two); torch.round: half to even


def _norm_rel_bound(D):
    """Relative bound on the fp32 normed value ``(x r) (1 + w)`` of either side (stock's torch ops, the fused
    kernel) against its exact value ``x (1 + w) / sqrt(sum x^2 / D + eps)``, for any order of the sum:

    * ``x^2`` is exact in fp32 (a bf16 square has 16 significant bits); the D - 1 additions of positive terms
      give ``sum (1 + t)`` with ``|t| <= gamma_{D-1}`` in any order, with or without FMA contraction;
    * the mean: 2 ulp (``div.full.f32``, 4u; torch's ``sum * (1/D)``: 2u); ``+ eps``: u, and eps itself rounded
      to fp32: u. So the rsqrt's argument is within gamma_{D+5} of exact, which rsqrt halves;
    * rsqrt itself: 2 ulp (CUDA ``rsqrtf``, PTX ``rsqrt.approx``: 4u); ``1 + w``: u; the two products: 2u.

    So ``|y - y*| <= (gamma_{D+5} / 2 + gamma_7) |y*|``. At D = 256 that is about 2^-16.9 relative, far below a
    bf16 half-ulp (>= 2^-9): the two sides' bf16 values are equal or adjacent, and adjacent only where ``y*`` lies
    within the bound of a rounding boundary.
    """
    return _gamma(D + 5) / 2 + _gamma(7)


def _normed_range(kw):
    """(lo, hi) [T, H, D] bf16: the bf16 values the normed value may legitimately take (``_norm_rel_bound``
    around the fp64 norm), equal where the exact value is not near a rounding boundary."""
    x = kw["x"]
    xd = x.double()
    y = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + kw["eps"]) * (1.0 + kw["weight"].double())
    e = _norm_rel_bound(x.shape[-1]) * y.abs()
    return _rn_bf16(y - e).to(torch.bfloat16), _rn_bf16(y + e).to(torch.bfloat16)


def _stock_rope_bounds(kw, lo, hi):
    """Elementwise (min, max) of stock's rope (its rounding points: bf16 products to nearest, or truncated for
    MRoPE, then their sum) over normed inputs in [lo, hi]. ``o1 = R(R(y1 cos) - R(y2 sin))`` and
    ``o2 = R(R(y2 cos) + R(y1 sin))`` are monotone in y1 and in y2 (every rounding is monotone), so the extremes are
    at the four corners (y1, y2 each lo or hi). This is the absolute bound the rope's cancellation needs: a
    one-ulp step of the normed input moves ``x cos - y sin`` by ``ulp(x) |cos| + ulp(y) |sin|`` (plus the
    products' roundings), many ulps of a small output; the dims past the rotary ones pass through: [lo, hi]."""
    rot = kw["cos_sin_cache"].shape[-1]
    half = rot // 2
    outs = []
    for a in (lo, hi):
        for b in (lo, hi):
            y = torch.cat((a[..., :half], b[..., half:rot], a[..., rot:]), dim=-1)
            outs.append(reference.apply_rope(y, kw["positions"], kw["cos_sin_cache"], kw["mrope_section"],
                                             kw["mrope_interleaved"], truncate_mrope=True).double())
    o = torch.stack(outs)
    return o.min(0).values, o.max(0).values


def _check(kw, seed):
    stock = reference.gemma_norm_rope(**kw)
    out = torch.full_like(stock, float("nan"))
    res = triton_kernel.gemma_norm_rope(**kw, out=out)
    assert res.data_ptr() == out.data_ptr()
    assert not torch.isnan(out).any(), f"unwritten output elements (seed {seed})"
    flips = (out != stock).sum().item()
    n = out.numel()
    # a flip: the fp32 norm's rounding on the other side of a bf16 boundary. Each element is checked against
    # the derived range below; no quota of flips (how many land near a boundary is the inputs' business)
    lo, hi = _normed_range(kw)
    normed = reference.gemma_rmsnorm(kw["x"], kw["weight"], kw["eps"])
    assert ((normed >= lo) & (normed <= hi)).all(), f"stock's norm outside the derived bound (seed {seed})"
    if kw["positions"] is None:
        bmin, bmax = lo.double(), hi.double()
    else:
        bmin, bmax = _stock_rope_bounds(kw, lo, hi)
    # the stock reference (the op's stock path) is stock's rope of stock's norm, which lies in [lo, hi]: within
    # the same range, element by element (its fp64 check below, 2%, would pass a 1% error)
    s = stock.double()
    far_s = int(((s < bmin) | (s > bmax)).sum())
    assert far_s == 0, f"stock reference: {far_s} of {n} elements outside the derived range (seed {seed})"
    o = out.double()
    far = int(((o < bmin) | (o > bmax)).sum())
    assert far == 0, (f"{far} of {n} elements are not stock's rope of a normed value within the norm's bound "
                      f"(seed {seed})")
    ref = reference.gemma_norm_rope_fp64(**{k: v for k, v in kw.items() if k != "out"})
    for name, val in (("fused", out), ("stock", stock)):
        err = (val.double() - ref).abs().max().item() / ref.abs().max().item()
        assert err < 2e-2, f"{name} max error {err} vs fp64 (seed {seed})"
    return flips


@needs_triton
@pytest.mark.parametrize("T", [1, 5])
def test_gate_interpreter_q_rope_1d(T, seed):
    _check(*_case(seed, T, 4, 128, 32, "1d"))


@needs_triton
def test_gate_interpreter_keys_norm_only_and_rope(seed):
    _check(*_case(seed, 7, 1, 128, 32, None, strided=False))
    _check(*_case(seed, 7, 1, 128, 32, "1d", strided=False, pos_stride=5))


@needs_triton
@pytest.mark.parametrize("D,R2", [(64, 16), (256, 64), (128, 128)])
def test_gate_interpreter_dims(D, R2, seed):
    _check(*_case(seed, 3, 2, D, R2, "1d"))


@needs_triton
def test_gate_interpreter_mrope(seed):
    _check(*_case(seed, 4, 4, 128, 64, "mrope", sections=(11, 11, 10), interleaved=True))
    _check(*_case(seed, 3, 4, 128, 64, "mrope", sections=(11, 11, 10), interleaved=True, equal_rows=True))
    _check(*_case(seed, 4, 2, 128, 32, "mrope", sections=(6, 5, 5), interleaved=False, pos_stride=2))


@needs_triton
def test_mrope_truncation_is_stock_rounding(seed):
    """Stock's MRoPE path rounds the rotary products toward zero; with equal position rows it differs from the
    1-D path only there. The fused kernel must round like stock's MRoPE where the two stock paths differ."""
    kw, _ = _case(seed, 6, 4, 128, 64, "mrope", sections=(11, 11, 10), equal_rows=True)
    a = reference.gemma_norm_rope(**kw)
    b = reference.gemma_norm_rope(**dict(kw, positions=kw["positions"][0], mrope_section=None))
    fused = triton_kernel.gemma_norm_rope(**kw)
    assert torch.equal(a[..., 64:], b[..., 64:])
    differs = a != b
    assert differs.any()  # truncation changes some codes (by about one bf16 ulp, no more)
    assert (a[..., :64].float() - b[..., :64].float()).abs().max() <= 2.0**-6 * b[..., :64].float().abs().max()
    # every element is stock MRoPE's rope of a normed value within the norm's derived bound (the fp32 sum-of-
    # squares order may flip a normed code, so a few may differ from stock's bits), and where the 1-D path's
    # value is outside what MRoPE's rounding can give from that range, the fused value is not the 1-D one
    _check(kw, seed)
    lo, hi = _normed_range(kw)
    bmin, bmax = _stock_rope_bounds(kw, lo, hi)
    only_1d = differs & ((b.double() < bmin) | (b.double() > bmax))
    assert only_1d.any(), "no element tells the two roundings apart"
    like_1d = int((fused[only_1d] == b[only_1d]).sum())
    assert like_1d == 0, f"{like_1d} of {int(only_1d.sum())} elements rounded like the 1-D path, not stock MRoPE"


@gpu
@pytest.mark.parametrize("T", [1, 4, 16, 64, 1000])
def test_gate_gpu_indexer_shapes(T, seed):
    _check(*_case(seed, T, 4, 128, 32, "1d"))
    _check(*_case(seed, T, 1, 128, 32, "1d", strided=False, pos_stride=5))  # compressed keys
    _check(*_case(seed, T, 1, 128, 32, None, strided=False))
    _check(*_case(seed, T, 4, 128, 64, "mrope", sections=(11, 11, 10)))
    _check(*_case(seed, T, 4, 128, 32, "mrope", sections=(6, 5, 5), interleaved=False, pos_stride=2))


@gpu
@pytest.mark.parametrize("D,R2", [(64, 16), (256, 64), (128, 128)])
def test_gate_gpu_dims(D, R2, seed):
    _check(*_case(seed, 333, 4, D, R2, "1d", strided=False))
