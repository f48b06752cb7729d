"""Shared expert in 4 launches (docs/semantics.md 3.6) from :mod:`.blocks`: the row quant of x with the expert
gate in the same pass, the gate_up GEMM, silu-and-mul with its quant (``v`` not rounded to bf16 first), the
down GEMM with the gate in its epilogue (one rounding where stock rounds twice)."""
from __future__ import annotations

import torch

from .blocks import mxfp4_gemm, rne_e4m3, row_quant, row_quant_gate, silu_and_mul, silu_mul_quant
from .reference import SharedExpertWeights

__all__ = ["mxfp4_gemm", "rne_e4m3", "row_quant", "row_quant_gate", "shared_expert", "silu_and_mul",
           "silu_mul_quant"]


def shared_expert(x: torch.Tensor, weights: SharedExpertWeights, out: torch.Tensor | None = None) -> torch.Tensor:
    w = weights
    xq, xs, g = row_quant_gate(x, w.wg)
    gu = mxfp4_gemm(xq, xs, w.w1_packed, w.w1_scales)
    aq, as_ = silu_mul_quant(gu)
    return mxfp4_gemm(aq, as_, w.w2_packed, w.w2_scales, gate=g, out=out)
