"""Gate of R9K_QSA_GLUE (docs/semantics.md 3.7): the fused norm + rope is bit-equal to the stock ops except
fp32 sum-of-squares order flips, on fewer than 0.1% of elements; both stay within bf16 rounding of an fp64
evaluation. CPU (Triton interpreter) at small shapes; the real indexer shapes on a GPU."""
from __future__ import annotations

import itertools

import pytest
import torch

from .._testing import bf16_ulp
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


def _check(kw, seed):
    stock = reference.gemma_norm_rope(**kw)
    out = torch.full_like(stock, float("nan"))
    res = triton_kernel.gemma_norm_rope(**kw, out=out)
    assert res.data_ptr() == out.data_ptr()
    assert not torch.isnan(out).any(), f"unwritten output elements (seed {seed})"
    flips = (out != stock).sum().item()
    n = out.numel()
    # a flip: the fp32 norm's rounding on the other side of a bf16 boundary, an adjacent bf16 value, on at most
    # max(1, 0.1%) of the elements (0.1% of a small tensor would allow none)
    assert flips <= max(1, 1e-3 * n), f"{flips} of {n} elements differ from stock (seed {seed})"
    assert ((out.double() - stock.double()).abs() <= bf16_ulp(stock) * (1 + 1e-6)).all(), \
        f"an element differs from stock by more than one bf16 ulp (seed {seed})"
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
    n = int(differs.sum())
    like_stock = int((fused[differs] == a[differs]).sum())
    like_1d = int((fused[differs] == b[differs]).sum())
    # fp32 sum-of-squares order may flip a few codes anyway (the gate's 0.1% rule); the rest follow stock MRoPE
    assert like_stock >= n - max(1, int(1e-3 * a.numel())), f"{like_stock} of {n} like stock MRoPE, {like_1d} like 1-D"


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
