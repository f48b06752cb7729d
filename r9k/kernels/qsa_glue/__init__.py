"""QSA indexer glue (variant ``qsa_indexer_glue``, knob ``R9K_QSA_GLUE``): Gemma RMSNorm + neox rotary of the
indexer's query heads and compressed keys, one launch instead of ~20-30 eager ops (docs/semantics.md 3.7).
Op ``qsa_glue``: :func:`.reference.gemma_norm_rope`'s signature."""
from ..ops import KernelOp, register

from . import reference, triton_kernel

gemma_norm_rope = triton_kernel.gemma_norm_rope

OP = register(KernelOp(name="qsa_glue", variant="qsa_indexer_glue", stock=reference.gemma_norm_rope,
                       fused=triton_kernel.gemma_norm_rope, fused_values=frozenset({"r9k"})))

__all__ = ["OP", "gemma_norm_rope", "reference", "triton_kernel"]
