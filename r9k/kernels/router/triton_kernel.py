"""Fused Triton kernels of the MoE router: ``router_gemm`` (the skinny split-K GEMM of
``r9k.kernels._triton.skinny_gemm``) and ``moe_route`` (one program per row: fp32 softmax, non-finite exps
counting 0, top-k by iterated arg-max with ties to the lower expert id, optional renormalisation)."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .._triton import tuned
from .._triton.common import INTERPRETED, use_triton
from .._triton.skinny_gemm import BLOCK_M, default_skinny_config, skinny_gemm  # noqa: F401 - re-exported

from .reference import MAX_EXPERTS, MAX_TOPK  # noqa: F401 - the routing kernel's limits, re-exported


MAX_M = 16  # above this the wrappers use the stock GEMM (fp32-out mm, one rounding)


def router_gemm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """One launch for 1 <= M <= 16; above that, or without Triton, ``bf16(mm(x, w.T) in fp32)``."""
    from .reference import router_gemm_fp32_fallback

    if not (use_triton(x) and 1 <= x.shape[0] <= MAX_M and x.stride(1) == 1):
        return router_gemm_fp32_fallback(x, w, out=out)
    return skinny_gemm(x, w, out=out)


# ----------------------------------------------------------------------------------- moe routing

@triton.jit
def moe_route_kernel(
    logits_ptr, stride_lm, w_ptr, ids_ptr, E,
    TOPK: tl.constexpr, TOPK_P2: tl.constexpr, BLOCK_E: tl.constexpr, RENORM: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_E)
    valid = offs < E
    l = tl.load(logits_ptr + row * stride_lm + offs, mask=valid, other=0.0).to(tl.float32)
    # NaN never wins the max; padded lanes are -inf.
    l_c = tl.where(valid & (l == l), l, float("-inf"))
    mx = tl.max(l_c, axis=0)
    e = tl.exp(l_c - mx)
    # A non-finite exp (NaN from inf - inf or from an all -inf row, +inf) counts as 0; so do padded lanes.
    e = tl.where(valid & (e == e) & (e < float("inf")), e, 0.0)
    total = tl.sum(e, axis=0)
    inv = tl.where(total > 0.0, 1.0 / total, 0.0)
    p = e * inv
    # available lanes score p >= 0, taken and padded ones -1: distinct valid ids even for all-zero rows
    score = tl.where(valid, p, -1.0)
    jj = tl.arange(0, TOPK_P2)
    wv = tl.zeros([TOPK_P2], dtype=tl.float32)
    iv = tl.zeros([TOPK_P2], dtype=tl.int32)
    for j in tl.static_range(TOPK):
        best = tl.max(score, axis=0)
        idx = tl.min(tl.where(score == best, offs, BLOCK_E), axis=0)  # ties -> lower expert id
        pj = tl.sum(tl.where(offs == idx, p, 0.0), axis=0)
        wv = tl.where(jj == j, pj, wv)
        iv = tl.where(jj == j, idx, iv)
        score = tl.where(offs == idx, -1.0, score)
    if RENORM:
        den = tl.sum(wv, axis=0)  # unselected slots hold 0
        wv = tl.where(den > 0.0, wv / den, 0.0)
    wm = jj < TOPK
    tl.store(w_ptr + row * TOPK + jj, wv, mask=wm)
    tl.store(ids_ptr + row * TOPK + jj, iv, mask=wm)



TUNED_FILE = tuned.tuned_path(os.path.dirname(__file__))  # this device's file (absent: default configs)


def load_tuned(path: str = TUNED_FILE) -> dict:
    return tuned.read(path)


TUNED: dict = load_tuned()


def moe_route_warps() -> int:
    return int(TUNED.get("moe_route_warps", 4))


def moe_route(logits: torch.Tensor, top_k: int, renormalize: bool, out_weights=None, out_ids=None,
              num_warps: int | None = None):
    """Softmax + top-k (+ renormalisation) in one launch; logits [M, E] (E <= 1024), top_k <= 16 (<= E).
    Non-finite exps count as 0: ids always valid and distinct, weights finite (0 when a row's sum is 0)."""
    from .reference import check_route_args, moe_route_torch

    M, E = check_route_args(logits, top_k)
    if not use_triton(logits):
        return moe_route_torch(logits, top_k, renormalize, out_weights, out_ids)
    w = out_weights if out_weights is not None else torch.empty((M, top_k), dtype=torch.float32, device=logits.device)
    ids = out_ids if out_ids is not None else torch.empty((M, top_k), dtype=torch.int32, device=logits.device)
    assert logits.stride(1) == 1 and w.is_contiguous() and ids.is_contiguous()
    if M:
        moe_route_kernel[(M,)](logits, logits.stride(0), w, ids, E,
                               TOPK=top_k, TOPK_P2=triton.next_power_of_2(top_k), BLOCK_E=triton.next_power_of_2(E),
                               RENORM=renormalize,
                               num_warps=num_warps or moe_route_warps())
    return w, ids
