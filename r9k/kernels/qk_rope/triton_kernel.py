"""Fused attention q/k Gemma norm + MRoPE + output-gate split: one launch, grid (T, hq + hkv). A q-head
program norms and ropes its q half and copies the gate half; a k-head program its k head. The stock rounding
points, through :func:`r9k.kernels._triton.norm_rope.norm_rope_row`."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton.norm_rope import norm_rope_row, pos_args

from .reference import MROPE_SECTION


@triton.jit
def _qk_norm_rope_gate_kernel(qkv_ptr, wq_ptr, wk_ptr, q_ptr, k_ptr, g_ptr, pos_ptr, cache_ptr,
                              HQ, D, HALF, s_qkv, s_q, s_k, s_g, sp_row, sp_col, s_cache, eps, S0, S1, S2,
                              BLOCK_D: tl.constexpr, BLOCK_HALF: tl.constexpr, POS_MODE: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    row = qkv_ptr + t * s_qkv
    if h < HQ:
        x_row = row + h * 2 * D
        o_row = q_ptr + t * s_q + h * D
        w_ptr = wq_ptr
        # output-gate split: the second half of the head, copied unchanged
        d = tl.arange(0, BLOCK_D)
        md = d < D
        gv = tl.load(x_row + D + d, mask=md)
        tl.store(g_ptr + t * s_g + h * D + d, gv, mask=md)
    else:
        x_row = row + HQ * 2 * D + (h - HQ) * D
        o_row = k_ptr + t * s_k + (h - HQ) * D
        w_ptr = wk_ptr
    norm_rope_row(x_row, o_row, w_ptr, pos_ptr + t * sp_col, sp_row, cache_ptr, s_cache, D, HALF, eps,
                  S0, S1, S2, BLOCK_D, BLOCK_HALF, POS_MODE, False)


def qk_norm_rope_gate(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, positions: torch.Tensor,
                      cos_sin_cache: torch.Tensor, num_heads: int, num_kv_heads: int, head_dim: int = 256,
                      eps: float = 1e-6, mrope_section=MROPE_SECTION, mrope_interleaved: bool = True,
                      out=None):
    T = qkv.shape[0]
    hq, hkv, D = num_heads, num_kv_heads, head_dim
    if qkv.stride(-1) != 1 or qkv.shape[1] != (2 * hq + 2 * hkv) * D:
        raise ValueError("qkv must be [T, (2*hq + 2*hkv)*D] with a contiguous last dim")
    if out is None:
        out = (torch.empty((T, hq * D), dtype=qkv.dtype, device=qkv.device),
               torch.empty((T, hkv * D), dtype=qkv.dtype, device=qkv.device),
               torch.empty((T, hq * D), dtype=qkv.dtype, device=qkv.device))
    q, k, g = out
    pos, sp_row, sp_col, mode, s0, s1, s2 = pos_args(positions, mrope_section, mrope_interleaved)
    half = cos_sin_cache.shape[-1] // 2
    if 2 * half > D or cos_sin_cache.stride(-1) != 1:
        raise ValueError("rotary dims must be <= head_dim and the cache's last dim contiguous")
    if T == 0:
        return tuple(out)
    _qk_norm_rope_gate_kernel[(T, hq + hkv)](
        qkv, q_weight, k_weight, q, k, g, pos, cos_sin_cache, hq, D, half,
        qkv.stride(0), q.stride(0), k.stride(0), g.stride(0), sp_row, sp_col, cos_sin_cache.stride(0), float(eps),
        s0, s1, s2, BLOCK_D=triton.next_power_of_2(D), BLOCK_HALF=max(triton.next_power_of_2(half), 2),
        POS_MODE=mode, num_warps=2 if D >= 256 else 1,
    )
    return tuple(out)
