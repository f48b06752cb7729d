"""Gated DeltaNet speculative-decode core (variant ``gdn_spec_decode_core``, knob ``R9K_GDN_DECODE``),
docs/semantics.md 3.10 step 2: q/k l2-norm, the decay and beta gates, the delta-rule recurrence over each
request's candidate tokens and the gated RMS-norm output, in one launch per layer (op ``gdn_decode``; the
signature is :func:`.reference.gdn_spec_decode_core`'s, ``state`` updated in place). The conv update runs
before it and is not part of this op."""
from ..ops import KernelOp, register

from . import reference, triton_kernel

gdn_spec_decode_core = triton_kernel.gdn_spec_decode_core

OP = register(KernelOp(name="gdn_decode", variant="gdn_spec_decode_core", stock=reference.gdn_spec_decode_core,
                       fused=triton_kernel.gdn_spec_decode_core, fused_values=frozenset({"r9k"})))

__all__ = ["OP", "gdn_spec_decode_core", "reference", "triton_kernel"]
