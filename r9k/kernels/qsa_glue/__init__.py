"""QSA indexer glue (variant ``qsa_indexer_glue``, knob ``R9K_QSA_GLUE``): Gemma RMSNorm + neox rotary of the
indexer's query heads and compressed keys, one launch instead of ~20-30 eager ops (docs/semantics.md 3.7).

Op ``qsa_glue``: ``gemma_norm_rope(x, weight, positions=None, cos_sin_cache=None, eps=1e-6,
mrope_section=None, mrope_interleaved=True, out=None) -> [T, H, D] bf16``

* ``x`` [T, H, D] bf16, last dim contiguous (q is a strided view of the ``[q: 4 x 128 | k: 128]`` row; the
  compressed keys are ``[G, 1, 128]``);
* ``positions`` None (norm only), [T] (1-D rotary) or [3, T] (MRoPE, needs ``mrope_section``); any strides
  (serving passes a column of a [T, 3] buffer);
* ``cos_sin_cache`` [max_pos, R2] bf16 rows ``[cos | sin]``; the first R2 dims of each row are rotated.
"""
from ..ops import KernelOp, register

from . import reference, triton_kernel

gemma_norm_rope = triton_kernel.gemma_norm_rope

OP = register(KernelOp(name="qsa_glue", variant="qsa_indexer_glue", stock=reference.gemma_norm_rope,
                       fused=triton_kernel.gemma_norm_rope, fused_values=frozenset({"r9k"})))

__all__ = ["OP", "gemma_norm_rope", "reference", "triton_kernel"]
