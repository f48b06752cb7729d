"""MoE router GEMM (``router_gemm``, variant ``router_gemm``, knob R9K_ROUTER) and fused routing
(``moe_route``, variant ``moe_fused_routing``, knob R9K_MOE_ROUTE).

Signatures (stock and fused are interchangeable):

* ``router_gemm(x, w, out=None) -> logits``: x [M, 2560] bf16, w [512, 2560] bf16 (contiguous),
  logits [M, 512] bf16 = bf16(x @ w.T) with fp32 accumulation. Fused: one Triton launch for
  1 <= M <= 16, the fp32-out GEMM rounded once above.
* ``moe_route(logits, top_k, renormalize, out_weights=None, out_ids=None) -> (weights, ids)``:
  logits [M, E] bf16/fp32 (E <= 1024), top_k <= 16; weights [M, k] fp32, ids [M, k] int32, in
  selection order. Fused: one launch, ties to the lower expert id, robust to NaN/inf rows.
"""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .triton_kernel import moe_route, router_gemm, skinny_gemm

register(KernelOp(name="router_gemm", variant="router_gemm", stock=reference.router_gemm,
                  fused=triton_kernel.router_gemm, fused_values=frozenset({"r9k"})))
register(KernelOp(name="moe_route", variant="moe_fused_routing", stock=reference.moe_route,
                  fused=triton_kernel.moe_route, fused_values=frozenset({"r9k"})))

__all__ = ["router_gemm", "moe_route", "skinny_gemm", "reference", "triton_kernel"]
