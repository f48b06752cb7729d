"""Hyper-connection combine + grouped Gemma norm in one launch (docs/semantics.md 3.2).

Grid ``(M * hc,)``: one program per (row, stream), the stream's HD values in NT tiles of BLOCK (HD = NT * BLOCK
exactly, so no lane is masked at HD = 2560: 5 tiles of 512; vLLM's kernel pads 2560 to 4096). Pass 1 loads the
residual and block tiles, forms ``out = bf16(res + blk * g)`` (mul then add in fp32, as the unfused combine),
stores it and accumulates the sum of squares of the rounded values; pass 2 re-forms ``out`` from the same
(cache-resident) inputs and writes ``y = bf16(out * r * (1 + w))``. The grouped norm alone (``blk`` None) is
the same kernel with the combine left out. With programmatic dependent launch (``R9K_PDL``, SM90) the program
waits for its predecessor's writes before the first load and lets its successor start after the last.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from r9k.kernels._triton.common import rne_bf16, use_triton
from r9k.kernels._triton.pdl import gdc_launch_dependents, gdc_wait, pdl_enabled

from . import reference


@triton.jit
def _hc_combine_norm_kernel(res_ptr, blk_ptr, inj_ptr, w_ptr, out_ptr, y_ptr, s_res, s_blk, s_inj, s_out, s_y,
                            eps, HC: tl.constexpr, HD: tl.constexpr, BLOCK: tl.constexpr, NT: tl.constexpr,
                            COMBINE: tl.constexpr, W_SHARED: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // HC
    s = pid % HC
    offs = tl.arange(0, BLOCK)
    if PDL:
        gdc_wait()
    g = 0.0
    if COMBINE:
        lg = tl.load(inj_ptr + row * s_inj + s).to(tl.float32)
        g = 2.0 / (1.0 + tl.exp(-lg / HC))
    res_row = res_ptr + row * s_res + s * HD
    ss = tl.zeros([BLOCK], tl.float32)
    for t in tl.static_range(NT):
        x = tl.load(res_row + t * BLOCK + offs).to(tl.float32)
        if COMBINE:
            b = tl.load(blk_ptr + row * s_blk + t * BLOCK + offs).to(tl.float32)
            x = rne_bf16(x + b * g)
            tl.store(out_ptr + row * s_out + s * HD + t * BLOCK + offs, x.to(tl.bfloat16))
        ss += x * x
    r = tl.math.rsqrt(tl.sum(ss, axis=0) / HD + eps)
    if PDL:
        gdc_launch_dependents()
    for t in tl.static_range(NT):
        x = tl.load(res_row + t * BLOCK + offs).to(tl.float32)
        if COMBINE:
            b = tl.load(blk_ptr + row * s_blk + t * BLOCK + offs).to(tl.float32)
            x = rne_bf16(x + b * g)
        if W_SHARED:
            w = tl.load(w_ptr + t * BLOCK + offs).to(tl.float32)
        else:
            w = tl.load(w_ptr + s * HD + t * BLOCK + offs).to(tl.float32)
        y = rne_bf16((x * r) * (1.0 + w))
        tl.store(y_ptr + row * s_y + s * HD + t * BLOCK + offs, y.to(tl.bfloat16))


def _block(hd: int) -> int:
    """The largest power-of-two tile (<= 1024) that divides HD."""
    b = 1024
    while b > 1 and hd % b:
        b //= 2
    return b


def hc_combine_norm(res: torch.Tensor, blk, inj, weight: torch.Tensor, eps: float = 1e-6, hc: int = 4,
                    out: torch.Tensor | None = None, y: torch.Tensor | None = None):
    """One-launch form of :func:`r9k.kernels.hc_norm.reference.hc_combine_norm` (same arguments)."""
    M, dim = res.shape
    hd = dim // hc
    block = _block(hd)
    if not use_triton(res) or M == 0 or res.stride(1) != 1 or block < 16 or dim % hc \
            or (blk is not None and (blk.stride(1) != 1 or inj.stride(1) != 1)):
        return reference.hc_combine_norm(res, blk, inj, weight, eps, hc)
    w = weight.contiguous()
    if y is None:
        y = torch.empty((M, dim), dtype=torch.bfloat16, device=res.device)
    combine = blk is not None
    if combine and out is None:
        out = torch.empty((M, dim), dtype=torch.bfloat16, device=res.device)
    _hc_combine_norm_kernel[(M * hc,)](
        res, blk if combine else res, inj if combine else res, w, out if combine else y, y,
        res.stride(0), blk.stride(0) if combine else 0, inj.stride(0) if combine else 0,
        out.stride(0) if combine else 0, y.stride(0), float(eps),
        HC=hc, HD=hd, BLOCK=block, NT=hd // block, COMBINE=combine, W_SHARED=w.numel() == hd,
        PDL=pdl_enabled(res), num_warps=4, **({"launch_pdl": True} if pdl_enabled(res) else {}))
    return (out if combine else res), y
