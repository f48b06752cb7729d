"""Stock path of the QSA indexer glue (docs/semantics.md 3.7): vLLM's native GemmaRMSNorm (fp32, one bf16
rounding), then the neox rotary of ``ApplyRotaryEmb.forward_static`` (bf16 ops) on the first ``rotary_dim``
dims; for MRoPE positions vLLM's Triton MRoPE kernel, whose products are truncated to bf16, emulated op by op."""
from __future__ import annotations

import torch
from .._out import into
from .._rope import apply_rope, cos_sin_fp64, gemma_rmsnorm, norm_rope_fp64


def gemma_norm_rope(x: torch.Tensor, weight: torch.Tensor, positions: torch.Tensor | None = None,
                    cos_sin_cache: torch.Tensor | None = None, eps: float = 1e-6, mrope_section=None,
                    mrope_interleaved: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """Gemma RMSNorm of each D-row of ``x`` [T, H, D] bf16 (last dim contiguous), then neox rotary.

    positions: None (norm only), [T] or [3, T] (MRoPE rows t, h, w, with ``mrope_section``); cos_sin_cache:
    [max_pos, rotary_dim] bf16 rows ``[cos | sin]``; out: optional [T, H, D] bf16."""
    y = gemma_rmsnorm(x, weight, eps)
    if positions is not None:
        y = apply_rope(y, positions, cos_sin_cache, mrope_section, mrope_interleaved, truncate_mrope=True)
    return into(out, y)


def gemma_norm_rope_fp64(x, weight, positions=None, cos_sin_cache=None, eps=1e-6, mrope_section=None,
                         mrope_interleaved=True) -> torch.Tensor:
    if positions is None:
        return norm_rope_fp64(x.double(), weight, eps)
    return norm_rope_fp64(x.double(), weight, eps, *cos_sin_fp64(positions, cos_sin_cache, mrope_section,
                                                                  mrope_interleaved))


def rope_cos_sin_cache(rotary_dim: int, max_pos: int, theta: float, device=None,
                       dtype=torch.bfloat16) -> torch.Tensor:
    """vLLM's neox rotary cache: row p = ``[cos(p * inv_freq) | sin(p * inv_freq)]``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim))
    t = torch.arange(max_pos, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
