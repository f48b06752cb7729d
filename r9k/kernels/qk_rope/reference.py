"""Stock path of the attention q/k norm + MRoPE + output-gate split (docs/semantics.md 3.8): vLLM's eager path
with ``attn_output_gate``, op for op: split the qkv row ``[q_gate (hq x 2D) | k | v]``, each q head into ``q``
and ``gate``, copied contiguous; GemmaRMSNorm on every q and k head; neox rotary on the first 64 of 256 dims
(interleaved MRoPE [11, 11, 10], vLLM's native forward, bf16 ops). The gate is returned unchanged, v untouched."""
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
    """``(q [T, hq*D], k [T, hkv*D], gate [T, hq*D])``; qkv [T, hq*2D + 2*hkv*D] bf16 (last dim
    contiguous); positions [3, T] (MRoPE) or [T]; cos_sin_cache [max_pos, R2] rows ``[cos | sin]``; ``out``: the
    three outputs preallocated."""
    T = qkv.shape[0]
    hq, hkv, D = num_heads, num_kv_heads, head_dim
    q_gate, k, _v = qkv.split([hq * 2 * D, hkv * D, hkv * D], dim=-1)
    q_gate = q_gate.view(T, hq, 2 * D)
    q, gate = torch.chunk(q_gate, 2, dim=-1)
    q = q.reshape(T, hq * D)
    gate = gate.reshape(T, hq * D)
    q = gemma_rmsnorm(q.view(T, hq, D), q_weight, eps)
    k = gemma_rmsnorm(k.reshape(T, hkv, D), k_weight, eps)
    sections = mrope_section if positions.dim() == 2 else None
    q = apply_rope(q, positions, cos_sin_cache, sections, mrope_interleaved, truncate_mrope=False).reshape(T, hq * D)
    k = apply_rope(k, positions, cos_sin_cache, sections, mrope_interleaved, truncate_mrope=False).reshape(T, hkv * D)
    if out is not None:
        for dst, src in zip(out, (q, k, gate)):
            dst.copy_(src)
        return tuple(out)
    return q, k, gate


def _heads_and_angles(qkv, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim, mrope_section,
                      mrope_interleaved):
    """fp64 q and k heads of ``qkv`` (without the gate halves) and the cos and sin of each token's
    rotated pairs."""
    T = qkv.shape[0]
    hq, hkv, D = num_heads, num_kv_heads, head_dim
    x = qkv.double()
    q = x[:, : hq * 2 * D].view(T, hq, 2 * D)[..., :D]
    k = x[:, hq * 2 * D: hq * 2 * D + hkv * D].reshape(T, hkv, D)
    return (q, k, *cos_sin_fp64(positions, cos_sin_cache, mrope_section, mrope_interleaved))


def rope_input_slack(qkv, q_weight, k_weight, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim=256,
                     eps=1e-6, mrope_section=MROPE_SECTION, mrope_interleaved=True):
    """(q, k): per element, what stock's extra roundings (the normed input, then each rotary product,
    to bf16) can move it, the fused kernel rounding only its result: ``ulp(x1)|cos| + ulp(x1 cos) + ulp(x2)|sin| +
    ulp(x2 sin)`` on the rotated dims, ``ulp(y)`` on the others. Where the two terms nearly cancel this is many ulps
    of the result, so one ulp of the result alone cannot bound a correct kernel."""
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
    T = qkv.shape[0]
    q, k, cos, sin = _heads_and_angles(qkv, positions, cos_sin_cache, num_heads, num_kv_heads, head_dim,
                                       mrope_section, mrope_interleaved)
    return (norm_rope_fp64(q, q_weight, eps, cos, sin).reshape(T, -1),
            norm_rope_fp64(k, k_weight, eps, cos, sin).reshape(T, -1))
