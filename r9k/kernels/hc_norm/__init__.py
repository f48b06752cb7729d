"""Hyper-connection combine + grouped Gemma norm at decode widths in one launch (op ``hc_combine_norm``,
variant ``hc_combine_norm_fused``, knob ``R9K_HC_COMBINE_NORM``, docs/semantics.md 3.2).

``hc_combine_norm(res, blk, inj, weight, eps=1e-6, hc=4) -> (out, y)``: res [M, hc*HD] bf16 (the streams), blk
[M, HD] bf16 or None (nothing pending: the grouped norm alone, ``out`` is ``res``), inj [M, hc], weight [HD] or
[hc*HD]; per stream ``out = bf16(res + blk * 2*sigmoid(inj/hc))``, ``y = bf16(out * rsqrt(mean(out^2) + eps)
* (1 + w))``. Stock: the plain composition (about 17 launches)."""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .triton_kernel import hc_combine_norm

OP = register(KernelOp(name="hc_combine_norm", variant="hc_combine_norm_fused", stock=reference.hc_combine_norm,
                       fused=triton_kernel.hc_combine_norm, fused_values=frozenset({"r9k"})))

__all__ = ["OP", "hc_combine_norm", "reference", "triton_kernel"]
