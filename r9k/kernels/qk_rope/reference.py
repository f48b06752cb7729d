"""Stock path of the attention q/k norm + MRoPE + output-gate split (docs/semantics.md 3.8).

vLLM's eager path for a full-attention layer with ``attn_output_gate`` (Qwen3-Next style), op for op:
split the qkv row ``[q_gate (hq x 2D) | k (hkv x D) | v (hkv x D)]``; view q_gate as [T, hq, 2D] and chunk
each head into ``q = [:D]`` and ``gate = [D:]``; ``reshape`` both to [T, hq*D] (copies, the views are not
contiguous); GemmaRMSNorm (native, eps 1e-6, ``1 + w``) on every q and k head; rotary on the first 64 of 256
dims (neox pairs, interleaved MRoPE [11, 11, 10], theta 1e7; vLLM's native forward, bf16 ops rounding to
nearest). The gate is returned unchanged (``attn_out * sigmoid(gate)`` happens after attention). v is not
touched (a view of qkv).
"""
from __future__ import annotations

import torch

from .._rope import apply_rope, cos_sin_fp64, gemma_rmsnorm, norm_rope_fp64

MROPE_SECTION = (11, 11, 10)
ROPE_THETA = 1e7
ROTARY_DIM = 64


def qk_norm_rope_gate(qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, positions: torch.Tensor,
                      cos_sin_cache: torch.Tensor, num_heads: int, num_kv_heads: int, head_dim: int = 256,
                      eps: float = 1e-6, mrope_section=MROPE_SECTION, mrope_interleaved: bool = True,
                      out=None):
    """Returns ``(q, k, gate)``: [T, hq*D], [T, hkv*D] (normed + roped) and [T, hq*D] (the gate, copied).

    qkv:           [T, hq*2D + 2*hkv*D] bf16 (rows may be strided; last dim contiguous).
    q_weight/k_weight: [D] bf16 Gemma norm weights.
    positions:     [3, T] int (MRoPE rows t, h, w; any strides) or [T] (1-D rotary).
    cos_sin_cache: [max_pos, R2] bf16 rows ``[cos | sin]`` (R2 = 64 rotated dims for this model).
    out:           optional tuple of three preallocated outputs (q, k, gate).
    """
    T = qkv.shape[0]
    hq, hkv, D = num_heads, num_kv_heads, head_dim
    q_gate, k, _v = qkv.split([hq * 2 * D, hkv * D, hkv * D], dim=-1)
    q_gate = q_gate.view(T, hq, 2 * D)
    q, gate = torch.chunk(q_gate, 2, dim=-1)
    q = q.reshape(T, hq * D)
    gate = gate.reshape(T, hq * D)
    q = gemma_rmsnorm(q.view(T, hq, D), q_weight, eps)
    k = gemma_rmsnorm(k.reshape(T, hkv, D), k_weight, eps)
    q = apply_rope(q, positions, cos_sin_cache, mrope_section if positions.dim() == 2 else None,
                   mrope_interleaved, truncate_mrope=False).reshape(T, hq * D)
    k = apply_rope(k, positions, cos_sin_cache, mrope_section if positions.dim() == 2 else None,
                   mrope_interleaved, truncate_mrope=False).reshape(T, hkv * D)
    if out is not None:
        for dst, src in zip(out, (q, k, gate)):
            dst.copy_(src)
        return tuple(out)
    return q, k, gate


def _heads_and_angles(qkv, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim, mrope_section,
                      mrope_interleaved):
    """fp64 views of the q and k heads of ``qkv`` ([T, hq, D], [T, hkv, D]; the gate half of each q head left
    out) and the cos and sin of each token's rotated pairs (:func:`r9k.kernels._rope.cos_sin_fp64`)."""
    T = qkv.shape[0]
    hq, hkv, D = num_heads, num_kv_heads, head_dim
    x = qkv.double()
    q = x[:, : hq * 2 * D].view(T, hq, 2 * D)[..., :D]
    k = x[:, hq * 2 * D: hq * 2 * D + hkv * D].reshape(T, hkv, D)
    return (q, k, *cos_sin_fp64(positions, cos_sin_cache, mrope_section, mrope_interleaved))


def rope_input_slack(qkv, q_weight, k_weight, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim=256,
                     eps=1e-6, mrope_section=MROPE_SECTION, mrope_interleaved=True):
    """(q, k): per output element, what stock's extra roundings can move it, the fused kernel rounding only
    its result: stock rounds the normed input ``y`` to bf16 before the rope, then each product (``x1*cos``,
    ``x2*sin``: torch bf16 ops) to bf16. Bound: ``ulp(x1)|cos| + ulp(x1 cos) + ulp(x2)|sin| + ulp(x2 sin)`` on
    the rotated dims (each rounding at most half an ulp: a factor 2 of margin), ``ulp(y)`` on the others.
    Where the two rotated terms nearly cancel this is many ulps of the (small) result, so a bound of one ulp
    of the result alone cannot hold for a correct kernel (an H200 gate run found a product rounding the
    input term alone did not cover: seed 80770319)."""
    from .._testing import bf16_ulp

    T = qkv.shape[0]
    q, k, cos, sin = _heads_and_angles(qkv, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim,
                                       mrope_section, mrope_interleaved)
    cos, sin, half = cos.abs(), sin.abs(), cos.shape[-1]
    rot = 2 * half

    def one(v, w):
        y = norm_rope_fp64(v, w, eps)
        u = bf16_ulp(y)
        y1, y2, u1, u2 = y[..., :half], y[..., half:rot], u[..., :half], u[..., half:rot]
        p = bf16_ulp(y1 * cos) + bf16_ulp(y2 * sin)  # o1's products; o2's are the same pairs swapped
        p2 = bf16_ulp(y2 * cos) + bf16_ulp(y1 * sin)
        return torch.cat((u1 * cos + u2 * sin + p, u2 * cos + u1 * sin + p2, u[..., rot:]), dim=-1)

    return one(q, q_weight).reshape(T, -1), one(k, k_weight).reshape(T, -1)


def qk_norm_rope_fp64(qkv, q_weight, k_weight, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim=256,
                      eps=1e-6, mrope_section=MROPE_SECTION, mrope_interleaved=True):
    """(q, k) of the same formula in fp64, no intermediate rounding."""
    T = qkv.shape[0]
    q, k, cos, sin = _heads_and_angles(qkv, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim,
                                       mrope_section, mrope_interleaved)
    return (norm_rope_fp64(q, q_weight, eps, cos, sin).reshape(T, -1),
            norm_rope_fp64(k, k_weight, eps, cos, sin).reshape(T, -1))
