"""Attention q/k Gemma norm + MRoPE + output-gate split (variant ``fused_qk_norm_rope``, knob
``R9K_FUSED_QKROPE``), docs/semantics.md 3.8: one launch where the eager path runs ~30 ops. Op
``qk_norm_rope``: :func:`.reference.qk_norm_rope_gate`'s signature, ``(q, k, gate)`` bf16 and contiguous."""
from ..ops import KernelOp, register

from . import reference, triton_kernel

qk_norm_rope_gate = triton_kernel.qk_norm_rope_gate

OP = register(KernelOp(name="qk_norm_rope", variant="fused_qk_norm_rope", stock=reference.qk_norm_rope_gate,
                       fused=triton_kernel.qk_norm_rope_gate, fused_values=frozenset({"1"})))

__all__ = ["OP", "qk_norm_rope_gate", "reference", "triton_kernel"]
