"""Shared expert in 4 launches (docs/semantics.md 3.6), from the building blocks in :mod:`.blocks` (which the stock
path launches too).

Fused form:
1. :func:`row_quant_gate`: per-row fp8 quant of x (appendix B) and, in the same pass over the row, the expert
   gate ``g = bf16(sigmoid(bf16(x . wg)))`` (the two roundings reproduce stock's bf16 GEMM output and bf16
   sigmoid), stored as fp32;
2. :func:`mxfp4_gemm`: gate_up GEMM, ``gu = bf16(acc * s_x)`` (unchanged from stock);
3. :func:`silu_mul_quant`: ``v = silu(gate) * up`` in fp32 (not rounded to bf16 first), per-row fp8 quant of v;
4. :func:`mxfp4_gemm` with the gate folded into the epilogue: ``out = bf16(acc * s_act * g)`` (one rounding where
   stock rounds twice).
"""
from __future__ import annotations

import torch

from .blocks import mxfp4_gemm, rne_e4m3, row_quant, row_quant_gate, silu_and_mul, silu_mul_quant
from .reference import SharedExpertWeights

__all__ = ["mxfp4_gemm", "rne_e4m3", "row_quant", "row_quant_gate", "shared_expert", "silu_and_mul",
           "silu_mul_quant"]


def shared_expert(x: torch.Tensor, weights: SharedExpertWeights, out: torch.Tensor | None = None) -> torch.Tensor:
    """Fused shared expert, 4 launches; same signature as :func:`r9k.kernels.shared_expert.reference.shared_expert`."""
    w = weights
    xq, xs, g = row_quant_gate(x, w.wg)
    gu = mxfp4_gemm(xq, xs, w.w1_packed, w.w1_scales)
    aq, as_ = silu_mul_quant(gu)
    return mxfp4_gemm(aq, as_, w.w2_packed, w.w2_scales, gate=g, out=out)
