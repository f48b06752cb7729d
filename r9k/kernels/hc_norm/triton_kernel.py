"""Hyper-connection combine + grouped Gemma norm in one launch (docs/semantics.md 3.2).

Grid ``(M * hc,)``: one program per (row, stream), the stream's HD values in one register tile. The norm weight
is loaded before the PDL wait (no predecessor writes it); ``out`` is stored and the successor released before
the norm. The grouped norm alone (``blk`` None) is the same kernel without the combine."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton.common import rne_bf16, use_triton
from .._triton.pdl import gdc_launch_dependents, gdc_wait, pdl_enabled

from . import reference


@triton.jit
def _hc_combine_norm_kernel(res_ptr, blk_ptr, inj_ptr, w_ptr, out_ptr, y_ptr, s_res, s_blk, s_inj, s_out, s_y,
                            eps, HC: tl.constexpr, HD: tl.constexpr, BLOCK: tl.constexpr,
                            COMBINE: tl.constexpr, W_SHARED: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // HC
    s = pid % HC
    offs = tl.arange(0, BLOCK)
    m = offs < HD
    # the norm weight is no predecessor's output: loaded before the wait
    if W_SHARED:
        w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    else:
        w = tl.load(w_ptr + s * HD + offs, mask=m, other=0.0).to(tl.float32)
    if PDL:
        gdc_wait()
    x = tl.load(res_ptr + row * s_res + s * HD + offs, mask=m, other=0.0).to(tl.float32)
    if COMBINE:
        lg = tl.load(inj_ptr + row * s_inj + s).to(tl.float32)
        b = tl.load(blk_ptr + row * s_blk + offs, mask=m, other=0.0).to(tl.float32)
        g = 2.0 / (1.0 + tl.exp(-lg / HC))
        x = rne_bf16(x + b * g)
        tl.store(out_ptr + row * s_out + s * HD + offs, x.to(tl.bfloat16), mask=m)
    if PDL:
        gdc_launch_dependents()
    r = tl.math.rsqrt(tl.sum(x * x, axis=0) / HD + eps)
    y = rne_bf16((x * r) * (1.0 + w))
    tl.store(y_ptr + row * s_y + s * HD + offs, y.to(tl.bfloat16), mask=m)


def _warps(m: int) -> int:
    """8 warps at one row, 4 from 4 rows on (the H200 sweep, notes/kernels-decode-width.md)."""
    return 8 if m == 1 else 4


def hc_combine_norm(res: torch.Tensor, blk, inj, weight: torch.Tensor, eps: float = 1e-6, hc: int = 4,
                    out: torch.Tensor | None = None, y: torch.Tensor | None = None, num_warps: int | None = None):
    """One-launch form of :func:`r9k.kernels.hc_norm.reference.hc_combine_norm` (``num_warps`` a
    tuning knob)."""
    M, dim = res.shape
    hd = dim // hc
    block = triton.next_power_of_2(hd)
    if not use_triton(res) or M == 0 or res.stride(1) != 1 or dim % hc or block > 16384 \
            or (blk is not None and (blk.stride(1) != 1 or inj.stride(1) != 1)):
        return reference.hc_combine_norm(res, blk, inj, weight, eps, hc)
    w = weight.contiguous()
    if y is None:
        y = torch.empty((M, dim), dtype=torch.bfloat16, device=res.device)
    combine = blk is not None
    pdl = pdl_enabled(res)
    if combine and out is None:
        out = torch.empty((M, dim), dtype=torch.bfloat16, device=res.device)
    _hc_combine_norm_kernel[(M * hc,)](
        res, blk if combine else res, inj if combine else res, w, out if combine else y, y,
        res.stride(0), blk.stride(0) if combine else 0, inj.stride(0) if combine else 0,
        out.stride(0) if combine else 0, y.stride(0), float(eps),
        HC=hc, HD=hd, BLOCK=block, COMBINE=combine, W_SHARED=w.numel() == hd,
        PDL=pdl, num_warps=num_warps or _warps(M), **({"launch_pdl": True} if pdl else {}))
    return (out if combine else res), y
