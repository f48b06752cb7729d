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
from .._rope import apply_rope, cos_sin_fp64, gemma_rmsnorm, norm_rope_fp64


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
    if positions is None:
        return norm_rope_fp64(x.double(), weight, eps)
    return norm_rope_fp64(x.double(), weight, eps, *cos_sin_fp64(positions, cos_sin_cache, mrope_section,
                                                                  mrope_interleaved))


def rope_cos_sin_cache(rotary_dim: int, max_pos: int, theta: float, device=None,
                       dtype=torch.bfloat16) -> torch.Tensor:
    """vLLM's neox rotary cache: row p = ``[cos(p * inv_freq) | sin(p * inv_freq)]``, inv_freq = theta^(-2i/rot)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim))
    t = torch.arange(max_pos, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
