"""Attention q/k Gemma norm + MRoPE + output-gate split (variant ``fused_qk_norm_rope``, knob
``R9K_FUSED_QKROPE``), docs/semantics.md 3.8: one launch where the eager path runs ~30 ops.

Op ``qk_norm_rope``: ``qk_norm_rope_gate(qkv, q_weight, k_weight, positions, cos_sin_cache, num_heads,
num_kv_heads, head_dim=256, eps=1e-6, mrope_section=(11, 11, 10), mrope_interleaved=True, out=None)
-> (q [T, hq*D], k [T, hkv*D], gate [T, hq*D])``, all bf16 and contiguous; ``v`` stays a view of ``qkv``.
Flash-Next: hq/hkv = 6/1 per rank at TP4, 12/1 at TP2; D = 256; 64 rotated dims; theta 1e7.
"""
from ..ops import KernelOp, register

from . import reference, triton_kernel

qk_norm_rope_gate = triton_kernel.qk_norm_rope_gate

OP = register(KernelOp(name="qk_norm_rope", variant="fused_qk_norm_rope", stock=reference.qk_norm_rope_gate,
                       fused=triton_kernel.qk_norm_rope_gate, fused_values=frozenset({"1"})))

__all__ = ["OP", "qk_norm_rope_gate", "reference", "triton_kernel"]
