"""Gate of R9K_FUSED_QKROPE (docs/semantics.md 3.8): q and k within relative max error 2e-2 of stock (we also
require every element within the derived distance of stock's: an adjacent bf16 value where the fp32 norm's
rounding lands across a bf16 boundary, plus what stock's extra roundings can move it; no quota of flips, whose
number is the inputs' business), the gate bit-exact, both paths close to an fp64 evaluation. CPU interpreter at small T; TP4 (6/1 heads) and TP2 (12/1) on a GPU."""
from __future__ import annotations

import pytest
import torch

from .._testing import bf16_ulp
from ..ops import triton_platform
from . import reference, triton_kernel
from ..qsa_glue.reference import rope_cos_sin_cache

needs_triton = pytest.mark.skipif(triton_platform() is None,
                                  reason="no Triton backend: needs a GPU or TRITON_INTERPRET=1 (kernels/conftest.py)")
D = 256


def _case(seed, device, T, hq, hkv, pos_kind="mrope", equal_rows=False, row_pad=0, max_pos=32768):
    g = torch.Generator(device="cpu").manual_seed(seed)
    width = (2 * hq + 2 * hkv) * D
    scale = torch.rand(T, 1, generator=g) * 3 + 0.05
    buf = (torch.randn(T, width + row_pad, generator=g) * scale).to(torch.bfloat16).to(device)
    qkv = buf[:, :width]  # rows strided when row_pad > 0
    wq = (torch.randn(D, generator=g) * 0.3).to(torch.bfloat16).to(device)
    wk = (torch.randn(D, generator=g) * 0.3).to(torch.bfloat16).to(device)
    cache = rope_cos_sin_cache(reference.ROTARY_DIM, max_pos, reference.ROPE_THETA).to(device)
    if pos_kind == "mrope":
        pos = torch.randint(0, max_pos, (3, T), generator=g).to(device)
        if equal_rows:  # text tokens: T = H = W
            pos[1] = pos[0]
            pos[2] = pos[0]
    else:
        pos = torch.randint(0, max_pos, (T, 3), generator=g).to(device)[:, 1]
    return dict(qkv=qkv, q_weight=wq, k_weight=wk, positions=pos, cos_sin_cache=cache, num_heads=hq,
                num_kv_heads=hkv, head_dim=D, eps=1e-6)


def _check(kw, seed, poison):
    sq, sk, sg = reference.qk_norm_rope_gate(**kw)
    out = tuple(poison(torch.empty_like(t)) for t in (sq, sk, sg))
    fq, fk, fg = triton_kernel.qk_norm_rope_gate(**kw, out=out)
    for name, f in (("q", fq), ("k", fk), ("gate", fg)):
        assert not torch.isnan(f).any(), f"{name}: unwritten elements (seed {seed})"
    assert torch.equal(fg, sg), f"gate not bit-exact (seed {seed})"
    rq, rk = reference.qk_norm_rope_fp64(**kw)
    slack = dict(zip("qk", reference.rope_input_slack(**kw)))
    for name, f, s, r in (("q", fq, sq, rq), ("k", fk, sk, rk)):
        rel = (f.float() - s.float()).abs().max().item() / s.float().abs().max().item()
        assert rel < 2e-2, f"{name}: relative max error {rel} vs stock (seed {seed})"
        # a flip is a rounding of the fp32 norm landing on the other side of a bf16 boundary (an adjacent bf16
        # value), plus what stock's extra roundings (the normed input, the products) can move the value before
        # the last rounding; the larger ulp where the two straddle a binade. Checked per element, no count:
        # a quota of max(1, 0.1%) flips is a coin the inputs toss (hc_norm's failed CI at one row that way)
        bound = torch.maximum(bf16_ulp(s), bf16_ulp(f)) + slack[name]
        far = int(((f.double() - s.double()).abs() > bound * (1 + 1e-6)).sum())
        assert far == 0, (f"{name}: {far} of {f.numel()} elements differ from stock by more than their rounding "
                          f"allows ({int((f != s).sum())} differ at all; seed {seed})")
        for which, v in (("fused", f), ("stock", s)):
            e = (v.double() - r).abs().max().item() / r.abs().max().item()
            assert e < 2e-2, f"{name} {which}: error {e} vs fp64 (seed {seed})"


@needs_triton
@pytest.mark.parametrize("T,hq,row_pad", [(1, 6, 0), (3, 2, 64)])
def test_gate_interpreter_mrope(T, hq, row_pad, seed, device, poison):
    _check(_case(seed, device, T, hq, 1, row_pad=row_pad), seed, poison)


@needs_triton
def test_gate_interpreter_text_rows_and_1d(seed, device, poison):
    _check(_case(seed, device, 2, 2, 1, equal_rows=True), seed, poison)
    _check(_case(seed + 1, device, 2, 2, 1, pos_kind="1d"), seed, poison)


@pytest.mark.gpu
@pytest.mark.parametrize("hq", [6, 12])  # TP4, TP2 (1 kv head per rank at both)
@pytest.mark.parametrize("T", [1, 4, 16, 37, 64, 4096])
def test_gate_gpu_shapes(T, hq, seed, device, poison):
    _check(_case(seed, device, T, hq, 1), seed, poison)
    _check(_case(seed + 1, device, T, hq, 1, equal_rows=True, row_pad=128), seed, poison)
    _check(_case(seed + 2, device, T, hq, 1, pos_kind="1d"), seed, poison)
