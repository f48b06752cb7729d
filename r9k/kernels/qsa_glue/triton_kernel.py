"""Fused QSA indexer glue: Gemma RMSNorm + neox rotary (1-D or MRoPE) in one launch, one program per
(token, head) row, with stock's rounding points (the MRoPE products truncated when ``TRUNC``); only the fp32
order of the sum of squares differs."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton.norm_rope import POS_MROPE_CONCAT, POS_MROPE_INTERLEAVED, POS_NONE, norm_rope_row, pos_args


@triton.jit
def _gemma_norm_rope_kernel(x_ptr, w_ptr, out_ptr, pos_ptr, cache_ptr, H, D, HALF,
                            sx_t, sx_h, so_t, so_h, sp_row, sp_col, s_cache, eps, S0, S1, S2,
                            BLOCK_D: tl.constexpr, BLOCK_HALF: tl.constexpr, POS_MODE: tl.constexpr,
                            TRUNC: tl.constexpr):
    row = tl.program_id(0)
    t = row // H
    h = row % H
    norm_rope_row(x_ptr + t * sx_t + h * sx_h, out_ptr + t * so_t + h * so_h, w_ptr, pos_ptr + t * sp_col,
                  sp_row, cache_ptr, s_cache, D, HALF, eps, S0, S1, S2, BLOCK_D, BLOCK_HALF, POS_MODE, TRUNC)


def gemma_norm_rope(x: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor | None = None,
                    cos_sin_cache: torch.Tensor | None = None, eps: float = 1e-6, mrope_section=None,
                    mrope_interleaved: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """Fused form of :func:`r9k.kernels.qsa_glue.reference.gemma_norm_rope`, one launch; D <= 1024,
    R2 <= D."""
    if x.dim() != 3 or x.stride(-1) != 1:
        raise ValueError("x must be [T, H, D] with a contiguous last dim")
    T, H, D = x.shape
    if out is None:
        out = torch.empty((T, H, D), dtype=x.dtype, device=x.device)
    pos, sp_row, sp_col, mode, s0, s1, s2 = pos_args(positions, mrope_section, mrope_interleaved)
    if mode != POS_NONE:
        half = cos_sin_cache.shape[-1] // 2
        if 2 * half > D or cos_sin_cache.stride(-1) != 1:
            raise ValueError("rotary dims must be <= D and the cache's last dim contiguous")
        cache, s_cache = cos_sin_cache, cos_sin_cache.stride(0)
    else:
        half, cache, s_cache, pos = 0, x, 0, x  # dummies (never read)
    if T * H == 0:
        return out
    _gemma_norm_rope_kernel[(T * H,)](
        x, weight, out, pos, cache, H, D, half,
        x.stride(0), x.stride(1), out.stride(0), out.stride(1), sp_row, sp_col, s_cache, float(eps), s0, s1, s2,
        BLOCK_D=triton.next_power_of_2(D), BLOCK_HALF=max(triton.next_power_of_2(max(half, 1)), 2),
        POS_MODE=mode, TRUNC=(mode in (POS_MROPE_INTERLEAVED, POS_MROPE_CONCAT)), num_warps=1 if D <= 256 else 4,
    )
    return out
