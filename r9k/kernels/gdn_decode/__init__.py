"""Gated DeltaNet speculative-decode core (variant ``gdn_spec_decode_core``, knob ``R9K_GDN_DECODE``),
docs/semantics.md 3.10 step 2: q/k l2-norm, q scaling, decay and beta gates, the delta-rule recurrence over
each request's 1..S candidate tokens (reading the last accepted slot's state, writing each token's state) and
the gated RMS-norm output, in one launch per layer.

Op ``gdn_decode``: ``gdn_spec_decode_core(mixed_qkv, z, b, a, A_log, dt_bias, norm_weight, state, cu_seqlens,
num_accepted, state_indices, num_k_heads, num_v_heads, head_k_dim=128, head_v_dim=128, eps=1e-6,
gate="sigmoid", scale=None, out=None) -> [T, Hv*Dv] bf16``; ``state`` is updated in place. The conv update
(vLLM's ``causal_conv1d_update``) runs before it and is not part of this op.
"""
from ..ops import KernelOp, register

from . import reference, triton_kernel

gdn_spec_decode_core = triton_kernel.gdn_spec_decode_core

OP = register(KernelOp(name="gdn_decode", variant="gdn_spec_decode_core", stock=reference.gdn_spec_decode_core,
                       fused=triton_kernel.gdn_spec_decode_core, fused_values=frozenset({"r9k"})))

__all__ = ["OP", "gdn_spec_decode_core", "reference", "triton_kernel"]
