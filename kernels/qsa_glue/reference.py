"""Stock path of the QSA indexer glue (docs/semantics.md 3.7): Gemma RMSNorm, then rotary.

This is what ``R9K_QSA_GLUE=stock`` runs: vLLM's native GemmaRMSNorm (fp32 ops, one bf16 rounding) followed by
the neox rotary of ``ApplyRotaryEmb.forward_static`` on the first ``rotary_dim`` dims (bf16 ops, each one
rounding to nearest) and a concat with the rest. For 3-row (MRoPE) positions stock runs vLLM's Triton MRoPE
kernel, whose two products are rounded to bf16 by *truncation* and only their sum to nearest; it is emulated
here op by op with the same rounding points.

Also here: :func:`gemma_norm_rope_fp64`, an fp64 evaluation of the same formula (no intermediate rounding), for
diagnostics in the tests.
"""
from __future__ import annotations

import torch
from .._out import into


def mrope_selector(half: int, sections, interleaved: bool) -> list[int]:
    """Which position row (0 = t, 1 = h, 2 = w) each rotary half-dim j takes its cos/sin from.

    Interleaved: row 1 where ``j % 3 == 1 and j < 3*s_h``, row 2 where ``j % 3 == 2 and j < 3*s_w``, else row 0.
    Concatenated: row 0 for ``j < s_t``, row 1 for ``j < s_t + s_h``, else row 2.
    """
    s_t, s_h, s_w = (int(s) for s in sections)
    sel = []
    for j in range(half):
        if interleaved:
            if j % 3 == 1 and j < 3 * s_h:
                sel.append(1)
            elif j % 3 == 2 and j < 3 * s_w:
                sel.append(2)
            else:
                sel.append(0)
        else:
            sel.append(0 if j < s_t else (1 if j < s_t + s_h else 2))
    return sel


_SELECTORS: dict = {}


def _selector_tensor(half, sections, interleaved, device) -> torch.Tensor:
    """The MRoPE row selector as a device tensor, made once per (shape, device): a host-to-device copy inside
    the forward would break CUDA-graph capture."""
    key = (half, tuple(int(s) for s in sections), bool(interleaved), str(device))
    t = _SELECTORS.get(key)
    if t is None:
        t = torch.tensor(mrope_selector(half, sections, interleaved), device=device)
        _SELECTORS[key] = t
    return t


def gemma_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """vLLM's GemmaRMSNorm.forward_static: ``bf16((x * rsqrt(mean(x^2) + eps)) * (1 + w))`` in fp32."""
    orig = x.dtype
    xf = x.float()
    var = xf.pow(2).mean(dim=-1, keepdim=True)
    xf = xf * torch.rsqrt(var + eps)
    xf = xf * (1.0 + weight.float())
    return xf.to(orig)


def _trunc_bf16(v: torch.Tensor) -> torch.Tensor:
    """Round an fp32 tensor to bf16 toward zero (drop the low 16 bits)."""
    return (v.contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


def apply_rope(y: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
               mrope_section=None, mrope_interleaved: bool = True, truncate_mrope: bool = True) -> torch.Tensor:
    """Neox rotary on the first ``rotary_dim = cos_sin_cache.shape[1]`` dims of ``y`` [T, H, D] (bf16).

    positions: [T] (1-D) or [3, T] (MRoPE rows t, h, w; needs ``mrope_section``).
    1-D: ``o1 = bf16(bf16(x1*cos) - bf16(x2*sin))``, ``o2 = bf16(bf16(x2*cos) + bf16(x1*sin))`` (torch bf16 ops).
    MRoPE: cos/sin of half-dim j from row ``sel(j)``; with ``truncate_mrope`` the products are truncated to bf16
    (vLLM's Triton MRoPE kernel on the original backend), otherwise rounded to nearest (vLLM's forward_native).
    """
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


def gemma_norm_rope(x: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor | None = None,
                    cos_sin_cache: torch.Tensor | None = None, eps: float = 1e-6, mrope_section=None,
                    mrope_interleaved: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """Gemma RMSNorm of each D-row of ``x`` then neox rotary (stock composition).

    x:             [T, H, D] bf16; any strides as long as the last dim is contiguous (q is a strided view of the
                   indexer projection row ``[q: H x D | k: D]``).
    weight:        [D] bf16 norm weight (used as ``1 + w``).
    positions:     None (norm only), [T] int (1-D, any stride) or [3, T] int (MRoPE rows t, h, w).
    cos_sin_cache: [max_pos, rotary_dim] bf16, each row ``[cos (rotary_dim/2) | sin (rotary_dim/2)]``.
    mrope_section: (t, h, w) section sizes summing to rotary_dim/2 when positions has 3 rows.
    out:           optional [T, H, D] bf16 to write into.
    Returns [T, H, D] bf16.
    """
    y = gemma_rmsnorm(x, weight, eps)
    if positions is not None:
        y = apply_rope(y, positions, cos_sin_cache, mrope_section, mrope_interleaved, truncate_mrope=True)
    return into(out, y)


def gemma_norm_rope_fp64(x, weight, positions=None, cos_sin_cache=None, eps=1e-6, mrope_section=None,
                         mrope_interleaved=True) -> torch.Tensor:
    """The same formula in fp64 with no intermediate rounding (inputs as given)."""
    xd = x.double()
    y = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.double())
    if positions is None:
        return y
    rot = cos_sin_cache.shape[-1]
    half = rot // 2
    if positions.dim() == 1:
        cs = cos_sin_cache.double()[positions]
        cos, sin = cs[:, None, :half], cs[:, None, half:]
    else:
        cs = cos_sin_cache.double()[positions]  # [3, T, rot]
        sel = torch.tensor(mrope_selector(half, mrope_section, mrope_interleaved), device=x.device)
        idx = sel.view(1, 1, half).expand(1, cs.shape[1], half)
        cos = cs[..., :half].gather(0, idx)[0][:, None, :]
        sin = cs[..., half:].gather(0, idx)[0][:, None, :]
    x1, x2 = y[..., :half], y[..., half:rot]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, y[..., rot:]), dim=-1)


def rope_cos_sin_cache(rotary_dim: int, max_pos: int, theta: float, device=None,
                       dtype=torch.bfloat16) -> torch.Tensor:
    """vLLM's neox rotary cache: row p = ``[cos(p * inv_freq) | sin(p * inv_freq)]``, inv_freq = theta^(-2i/rot)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim))
    t = torch.arange(max_pos, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
