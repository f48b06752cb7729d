"""Shared expert with its sigmoid scalar gate (variant ``shared_expert_fused``, knob ``R9K_SHARED_EXPERT``),
docs/semantics.md 3.6: MXFP4 weights, per-row fp8 activations; 8 launches (stock) to 4 (fused).

Op ``shared_expert``: ``shared_expert(x, weights, out=None) -> [M, H] bf16``, ``weights`` made once at load by
``prepare_shared_expert(w1_packed, w1_scales, w2_packed, w2_scales, wg)`` (``quantize_mxfp4`` makes the codes
from a float weight)."""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .reference import SharedExpertWeights, dequant_mxfp4, prepare_shared_expert, quantize_mxfp4

shared_expert = triton_kernel.shared_expert

OP = register(KernelOp(name="shared_expert", variant="shared_expert_fused", stock=reference.shared_expert,
                       fused=triton_kernel.shared_expert, fused_values=frozenset({"r9k"})))

__all__ = ["OP", "SharedExpertWeights", "dequant_mxfp4", "prepare_shared_expert", "quantize_mxfp4", "reference",
           "shared_expert", "triton_kernel"]
