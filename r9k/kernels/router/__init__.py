"""MoE router GEMM (``router_gemm``, variant ``router_gemm``, knob R9K_ROUTER) and fused routing
(``moe_route``, variant ``moe_fused_routing``, knob R9K_MOE_ROUTE); stock and fused interchangeable:

* ``router_gemm(x, w, out=None) -> logits``: ``bf16(x @ w.T)``, fp32 accumulation; fused: one launch for M <= 16.
* ``moe_route(logits, top_k, renormalize, out_weights=None, out_ids=None) -> (weights fp32, ids int32)`` [M, k]
  in selection order; fused: one launch, ties to the lower expert id, robust to NaN/inf rows."""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .triton_kernel import moe_route, router_gemm, skinny_gemm

register(KernelOp(name="router_gemm", variant="router_gemm", stock=reference.router_gemm,
                  fused=triton_kernel.router_gemm, fused_values=frozenset({"r9k"})))
register(KernelOp(name="moe_route", variant="moe_fused_routing", stock=reference.moe_route,
                  fused=triton_kernel.moe_route, fused_values=frozenset({"r9k"})))

__all__ = ["router_gemm", "moe_route", "skinny_gemm", "reference", "triton_kernel"]
