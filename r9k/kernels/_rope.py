"""Stock rotary and Gemma RMSNorm pieces of the ``qsa_glue`` and ``qk_rope`` references, and the same norm +
rotary in fp64 without intermediate rounding (the gates' references)."""
from __future__ import annotations

import torch


def mrope_selector(half: int, sections, interleaved: bool) -> list[int]:
    """Which position row (0 = t, 1 = h, 2 = w) each rotary half-dim j takes its cos/sin from."""
    s_t, s_h, s_w = (int(s) for s in sections)
    if interleaved:
        return [1 if j % 3 == 1 and j < 3 * s_h else 2 if j % 3 == 2 and j < 3 * s_w else 0 for j in range(half)]
    return [0 if j < s_t else 1 if j < s_t + s_h else 2 for j in range(half)]


_SELECTORS: dict = {}


def _selector_tensor(half, sections, interleaved, device) -> torch.Tensor:
    """The selector as a device tensor, made once per (shape, device): a host-to-device copy in the
    forward would break CUDA-graph capture."""
    key = (half, tuple(int(s) for s in sections), bool(interleaved), str(device))
    if key not in _SELECTORS:
        _SELECTORS[key] = torch.tensor(mrope_selector(half, sections, interleaved), device=device)
    return _SELECTORS[key]


def gemma_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """vLLM's GemmaRMSNorm.forward_static: ``bf16((x * rsqrt(mean(x^2) + eps)) * (1 + w))`` in fp32."""
    orig = x.dtype
    xf = x.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    xf = xf * torch.rsqrt(var + eps)
    xf = xf * (1.0 + weight.float())
    return xf.to(orig)


def _trunc_bf16(v: torch.Tensor) -> torch.Tensor:
    return (v.contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


def apply_rope(y: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
               mrope_section=None, mrope_interleaved: bool = True, truncate_mrope: bool = True) -> torch.Tensor:
    """Neox rotary on the first ``cos_sin_cache.shape[1]`` dims of ``y`` [T, H, D] (bf16); positions [T] or
    [3, T] (MRoPE rows t, h, w, with ``mrope_section``). MRoPE products are truncated to bf16 with
    ``truncate_mrope`` (vLLM's Triton MRoPE kernel), else rounded to nearest (its forward_native)."""
    rot = cos_sin_cache.shape[-1]
    half = rot // 2
    x_rot, x_pass = y[..., :rot], y[..., rot:]
    x1, x2 = torch.chunk(x_rot, 2, dim=-1)
    if positions.dim() == 1:
        cos_sin = cos_sin_cache.index_select(0, positions)
        cos, sin = cos_sin.chunk(2, dim=-1)
        cos = cos.unsqueeze(-2).to(y.dtype)
        sin = sin.unsqueeze(-2).to(y.dtype)
        o1 = x1 * cos - x2 * sin
        o2 = x2 * cos + x1 * sin
    else:
        if mrope_section is None:
            raise ValueError("3-row positions need mrope_section")
        cos_sin = cos_sin_cache[positions]  # [3, T, rot]
        cos, sin = cos_sin.chunk(2, dim=-1)  # [3, T, half]
        sel = _selector_tensor(half, mrope_section, mrope_interleaved, y.device)
        sel = sel.view(1, 1, half).expand(1, cos.shape[1], half)
        cos = cos.gather(0, sel)[0].unsqueeze(-2).to(y.dtype)
        sin = sin.gather(0, sel)[0].unsqueeze(-2).to(y.dtype)
        if truncate_mrope:
            x1f, x2f, cf, sf = x1.float(), x2.float(), cos.float(), sin.float()
            o1 = (_trunc_bf16(x1f * cf).float() - _trunc_bf16(x2f * sf).float()).to(y.dtype)
            o2 = (_trunc_bf16(x2f * cf).float() + _trunc_bf16(x1f * sf).float()).to(y.dtype)
        else:
            o1 = x1 * cos - x2 * sin
            o2 = x2 * cos + x1 * sin
    return torch.cat((torch.cat((o1, o2), dim=-1), x_pass), dim=-1)


def cos_sin_fp64(positions: torch.Tensor, cos_sin_cache: torch.Tensor, mrope_section=None,
                 mrope_interleaved: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 cos and sin of each token's rotated pairs, ``[T, 1, rot/2]`` each; positions [T] or [3, T]."""
    half = cos_sin_cache.shape[-1] // 2
    cs = cos_sin_cache.double()[positions]  # [T, rot] or [3, T, rot]
    if positions.dim() == 1:
        return cs[:, None, :half], cs[:, None, half:]
    sel = torch.tensor(mrope_selector(half, mrope_section, mrope_interleaved), device=cs.device)
    idx = sel.view(1, 1, half).expand(1, cs.shape[1], half)
    return cs[..., :half].gather(0, idx)[0][:, None, :], cs[..., half:].gather(0, idx)[0][:, None, :]


def norm_rope_fp64(x: torch.Tensor, weight: torch.Tensor, eps: float, cos=None, sin=None) -> torch.Tensor:
    """Gemma RMSNorm of the fp64 rows ``x``, then (with :func:`cos_sin_fp64`'s ``cos``/``sin``) the neox
    rotary of the first ``2 * cos.shape[-1]`` dims, in fp64."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.double())
    if cos is None:
        return y
    half = cos.shape[-1]
    x1, x2 = y[..., :half], y[..., half:2 * half]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, y[..., 2 * half:]), dim=-1)
