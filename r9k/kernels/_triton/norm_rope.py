"""Gemma RMSNorm + neox rotary (1-D or MRoPE) of one row (``norm_rope_row``), shared by ``qsa_glue`` and
``qk_rope``; ``pos_args`` turns a positions tensor into its kernel arguments."""
from __future__ import annotations

import triton
import triton.language as tl

from .common import rne_bf16

# Position modes (constexpr POS_MODE).
POS_NONE, POS_1D, POS_MROPE_INTERLEAVED, POS_MROPE_CONCAT = 0, 1, 2, 3


@triton.jit
def _round_prod(v, TRUNC: tl.constexpr):
    if TRUNC:
        return (v.to(tl.int32, bitcast=True) & -65536).to(tl.float32, bitcast=True)
    else:
        return rne_bf16(v)


@triton.jit
def norm_rope_row(x_row, o_row, w_ptr, pos_base, sp_row, cache_ptr, s_cache, D, HALF, eps, S0, S1, S2,
                  BLOCK_D: tl.constexpr, BLOCK_HALF: tl.constexpr, POS_MODE: tl.constexpr, TRUNC: tl.constexpr):
    """Norm (+ rotary) of ``x_row[0:D]`` into ``o_row[0:D]``. pos_base: this token's position (row 0 for
    MRoPE), sp_row: the stride between MRoPE rows; cache_ptr / s_cache: the cos|sin cache; S0..S2: MRoPE sections."""
    d = tl.arange(0, BLOCK_D)
    md = d < D
    x = tl.load(x_row + d, mask=md, other=0.0).to(tl.float32)
    r = tl.math.rsqrt(tl.sum(x * x, axis=0) / D + eps)
    w1 = 1.0 + tl.load(w_ptr + d, mask=md, other=0.0).to(tl.float32)
    y = rne_bf16(x * r * w1).to(tl.bfloat16)
    if POS_MODE == 0:
        tl.store(o_row + d, y, mask=md)
    else:
        # dims >= 2*HALF pass through from the norm
        tl.store(o_row + d, y, mask=md & (d >= 2 * HALF))
        j = tl.arange(0, BLOCK_HALF)
        mj = j < HALF
        x1 = tl.load(x_row + j, mask=mj, other=0.0).to(tl.float32)
        x2 = tl.load(x_row + HALF + j, mask=mj, other=0.0).to(tl.float32)
        wa = 1.0 + tl.load(w_ptr + j, mask=mj, other=0.0).to(tl.float32)
        wb = 1.0 + tl.load(w_ptr + HALF + j, mask=mj, other=0.0).to(tl.float32)
        y1 = rne_bf16(x1 * r * wa)
        y2 = rne_bf16(x2 * r * wb)
        if POS_MODE == 1:
            pos = tl.load(pos_base)
            crow = cache_ptr + pos * s_cache
            cos = tl.load(crow + j, mask=mj, other=0.0).to(tl.float32)
            sin = tl.load(crow + HALF + j, mask=mj, other=0.0).to(tl.float32)
        else:
            if POS_MODE == 2:
                sel = tl.where((j % 3 == 1) & (j < 3 * S1), 1, tl.where((j % 3 == 2) & (j < 3 * S2), 2, 0))
            else:
                sel = tl.where(j < S0, 0, tl.where(j < S0 + S1, 1, 2))
            pos = tl.load(pos_base + sel * sp_row, mask=mj, other=0)
            crow = cache_ptr + pos * s_cache
            cos = tl.load(crow + j, mask=mj, other=0.0).to(tl.float32)
            sin = tl.load(crow + HALF + j, mask=mj, other=0.0).to(tl.float32)
        o1 = _round_prod(y1 * cos, TRUNC) - _round_prod(y2 * sin, TRUNC)
        o2 = _round_prod(y2 * cos, TRUNC) + _round_prod(y1 * sin, TRUNC)
        tl.store(o_row + j, rne_bf16(o1).to(tl.bfloat16), mask=mj)
        tl.store(o_row + HALF + j, rne_bf16(o2).to(tl.bfloat16), mask=mj)


def pos_args(positions, mrope_section, mrope_interleaved):
    """(pos tensor, row stride, column stride, mode, S0, S1, S2) for the kernels."""
    if positions is None:
        return None, 0, 0, POS_NONE, 0, 0, 0
    if positions.dim() == 1:
        return positions, 0, positions.stride(0), POS_1D, 0, 0, 0
    if positions.dim() != 2 or positions.shape[0] != 3 or mrope_section is None:
        raise ValueError("positions must be [T] or [3, T] (the latter with mrope_section)")
    s0, s1, s2 = (int(s) for s in mrope_section)
    mode = POS_MROPE_INTERLEAVED if mrope_interleaved else POS_MROPE_CONCAT
    return positions, positions.stride(0), positions.stride(1), mode, s0, s1, s2
