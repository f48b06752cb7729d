"""Stock paths and fp64 references of the MoE router GEMM and routing (docs/semantics.md 3.4, 3.5): the
GEMM is ``F.linear`` (one cuBLAS launch); the routing fp32 softmax, top-k and optional renormalisation in
PyTorch (the semantics of vLLM's ``fused_topk``, notes/kernels-linear-routing.md)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from .._out import into

#: the routing kernel's limits (one program holds a row of E logits and its top-k); the stock path checks them too
MAX_TOPK = 16
MAX_EXPERTS = 1024


def router_gemm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    y = F.linear(x, w)
    return into(out, y)


def router_gemm_fp32_fallback(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The fused op's path above its decode widths: the GEMM with an fp32 output, rounded
    once to bf16."""
    try:
        y = torch.mm(x, w.t(), out_dtype=torch.float32)
    except (TypeError, RuntimeError):  # torch builds without the out_dtype overload for this device
        y = torch.mm(x.float(), w.float().t())
    return into(out, y.to(torch.bfloat16))


def router_gemm_fp64(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.double() @ w.double().t()


def check_route_args(logits: torch.Tensor, top_k: int) -> tuple[int, int]:
    if logits.dim() != 2:
        raise ValueError("logits must be [M, E]")
    M, E = logits.shape
    if not 1 <= top_k <= MAX_TOPK:
        raise ValueError(f"top_k must be in 1..{MAX_TOPK}, got {top_k}")
    if E > MAX_EXPERTS or top_k > E:
        raise ValueError(f"need top_k <= E <= {MAX_EXPERTS}, got E={E}, top_k={top_k}")
    return M, E


def moe_route_torch(logits, top_k, renormalize, out_weights=None, out_ids=None):
    """Plain-PyTorch routing with the fused kernel's rules (ties to the lower id, non-finite exps
    count as 0), where no Triton platform exists."""
    l = logits.float()
    l_c = torch.where(torch.isnan(l), torch.full_like(l, float("-inf")), l)
    mx = l_c.amax(dim=1, keepdim=True)
    e = torch.exp(l_c - mx)
    e = torch.where(torch.isfinite(e), e, torch.zeros_like(e))
    total = e.sum(dim=1, keepdim=True)
    p = e * torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
    # Stable sort on (-p) keeps the lower index first among equal probabilities.
    order = torch.sort(-p, dim=1, stable=True).indices[:, :top_k]
    w = torch.gather(p, 1, order)
    if renormalize:
        den = w.sum(dim=1, keepdim=True)
        w = torch.where(den > 0, w / den, torch.zeros_like(w))
    return into(out_weights, w), into(out_ids, order.to(torch.int32))


def moe_route(logits: torch.Tensor, top_k: int, renormalize: bool, out_weights=None, out_ids=None):
    """Stock routing: ``softmax(logits.float())``, ``torch.topk``, optional renormalisation; tie order is
    torch.topk's, NaN rows give NaN weights."""
    check_route_args(logits, top_k)
    p = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(p, top_k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return into(out_weights, w), into(out_ids, ids.to(torch.int32))


def moe_route_fp64(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.double(), dim=-1)
