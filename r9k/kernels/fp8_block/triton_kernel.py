"""Block-fp8 linear at decode widths: the quant kernel, the block-scaled GEMM on its output (two launches:
R9K_FP8_QA's stock) and the same GEMM with the quant in its A-load (one launch).

GEMM (M <= 16, one 16-row tile): grid = (N / BLOCK_N, SPLIT_K); per 128-group a program quantises x[:, g] in
registers (or loads the quant kernel's output), takes the e4m3 tile product and folds ``(partial * Bs) * sa``
into its fp32 sum; split-K partials are reduced in the same launch by the last program to arrive, in a fixed
order. Both paths run the same quant code, so they give the same bits."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .._out import into
from .._triton import tuned
from .._triton.common import INTERPRETED, interpreted_tile, to_bf16, to_e4m3, use_triton
from .._triton.counters import arrival_counters
from .._triton.pdl import gdc_launch_dependents, gdc_wait, pdl_enabled, prefetch_l2

from . import reference

GROUP = 128
BLOCK_M = 16
MAX_M = 16  # the fused (quant-in-A-load) form serves M <= 16, as in the original; above it: two launches


@triton.jit
def _quant_tile(x, INTERPRET: tl.constexpr):
    """x [BM, 128] fp32 -> (codes e4m3, sa [BM] fp32): A = max(amax, 1e-12), sa = A/448,
    q = e4m3(x * (448/A)), both divisions IEEE round-to-nearest (as torch)."""
    amax = tl.max(tl.abs(x), axis=1)
    A = tl.maximum(amax, 1e-12)
    r = tl.math.div_rn(tl.full(A.shape, 448.0, tl.float32), A)
    sa = tl.math.div_rn(A, tl.full(A.shape, 448.0, tl.float32))
    q = to_e4m3(x * r[:, None], INTERPRET)
    return q, sa


@triton.jit
def quant_group128_kernel(x_ptr, stride_xm, q_ptr, s_ptr, M, K, G,
                          BLOCK_G: tl.constexpr, INTERPRET: tl.constexpr):
    m = tl.program_id(0)
    offs_g = tl.program_id(1) * BLOCK_G + tl.arange(0, BLOCK_G)
    offs_k = tl.arange(0, 128)
    g_mask = offs_g < G
    cols = offs_g[:, None] * 128 + offs_k[None, :]
    x = tl.load(x_ptr + m * stride_xm + cols, mask=g_mask[:, None], other=0.0).to(tl.float32)
    q, sa = _quant_tile(x, INTERPRET)
    tl.store(q_ptr + m * K + cols, q, mask=g_mask[:, None])
    tl.store(s_ptr + m * G + offs_g, sa, mask=g_mask)


@triton.jit
def _group_step(acc, g, g_hi, x_ptr, stride_xm, qa_ptr, sa_ptr, w_ptr, bs_ptr, bs_row,
                offs_m, offs_n, offs_k, m_mask, n_mask, K, G,
                FUSED_QUANT: tl.constexpr, INTERPRET: tl.constexpr):
    """One 128-group of the K loop; ``g >= g_hi`` (an unrolled tail) adds nothing."""
    cols = g * 128 + offs_k
    mk = m_mask & ((offs_m * 0 + g) < g_hi)  # tensor-shaped: the interpreter rejects scalar-bool masks
    if FUSED_QUANT:
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + cols[None, :], mask=mk[:, None], other=0.0)
        q, sa = _quant_tile(x.to(tl.float32), INTERPRET)
    else:
        q = tl.load(qa_ptr + offs_m[:, None] * K + cols[None, :], mask=mk[:, None], other=0.0)
        sa = tl.load(sa_ptr + offs_m * G + g, mask=mk, other=0.0)
    nk = n_mask & ((offs_n * 0 + g) < g_hi)
    w = tl.load(w_ptr + offs_n[:, None] * K + cols[None, :], mask=nk[:, None], other=0.0)
    part = tl.dot(q, tl.trans(w))  # exact e4m3 products, fp32 accumulation
    bs = tl.load(bs_ptr + bs_row + g, mask=nk, other=0.0)
    return acc + (part * bs[None, :]) * sa[:, None]


@triton.jit
def fp8_block_gemm_kernel(
    x_ptr, stride_xm, qa_ptr, sa_ptr, w_ptr, bs_ptr, ws_ptr, cnt_ptr, out_ptr, stride_om,
    M, N, K, G, G_PER_SPLIT,
    FUSED_QUANT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
    INTERPRET: tl.constexpr, UNROLL: tl.constexpr = 0, PDL: tl.constexpr = False,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, 128)
    m_mask = offs_m < M
    n_mask = offs_n < N
    g_lo = pid_k * G_PER_SPLIT
    g_hi = tl.minimum(g_lo + G_PER_SPLIT, G)
    bs_row = (offs_n // 128) * G
    if PDL:
        # the weights are no predecessor's output: into the L2 before the wait
        wrow = tl.where(n_mask, w_ptr + offs_n.to(tl.int64) * K, w_ptr)
        for g in range(g_lo, g_hi):
            prefetch_l2(wrow + g * 128)
        gdc_wait()
        gdc_launch_dependents()

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if UNROLL > 0:
        # UNROLL == G_PER_SPLIT: the group loop fully unrolled, every load of the split issued up front
        for i in tl.static_range(UNROLL):
            acc = _group_step(acc, g_lo + i, g_hi, x_ptr, stride_xm, qa_ptr, sa_ptr, w_ptr, bs_ptr, bs_row,
                              offs_m, offs_n, offs_k, m_mask, n_mask, K, G, FUSED_QUANT, INTERPRET)
    else:
        for g in range(g_lo, g_hi):
            acc = _group_step(acc, g, g_hi, x_ptr, stride_xm, qa_ptr, sa_ptr, w_ptr, bs_ptr, bs_row,
                              offs_m, offs_n, offs_k, m_mask, n_mask, K, G, FUSED_QUANT, INTERPRET)

    out_mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K > 1:
        tl.store(ws_ptr + (pid_k * BLOCK_M + offs_m[:, None]) * N + offs_n[None, :], acc, mask=out_mask)
        tl.debug_barrier()  # every thread's partial is issued before the arrival is published
        arrived = tl.atomic_add(cnt_ptr + pid_n, 1)  # acq_rel, gpu scope
        out_mask = out_mask & ((tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32) + arrived) == SPLIT_K - 1)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        # fixed order: deterministic bits; unrolled so the last arriver issues every partial's load at once
        for s in tl.static_range(SPLIT_K):
            acc += tl.load(ws_ptr + (s * BLOCK_M + offs_m[:, None]) * N + offs_n[None, :],
                           mask=out_mask, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(cnt_ptr + pid_n, 0, mask=arrived == SPLIT_K - 1)  # reset for the next call
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], to_bf16(acc, INTERPRET), mask=out_mask)


# Tile configs: (BLOCK_N, SPLIT_K, num_warps, num_stages, UNROLL), UNROLL 1 unrolling a split's group loop;
# a device's sweep winners per (N, K) in tuned_<device>.json (``bench_fp8_block --sweep``).
TUNED_FILE = tuned.tuned_path(os.path.dirname(__file__))  # this device's file (absent: default configs)


def load_tuned(path: str = TUNED_FILE) -> dict:
    raw = tuned.read(path)
    return {tuple(int(v) for v in key.split("x")): tuple(cfg) for key, cfg in raw.items()}


TUNED: dict = load_tuned()


def default_config(n: int, k: int) -> tuple[int, int, int, int, int]:
    """The device's tuned config for (n, k), else BLOCK_N 64 and split K until ~128 programs."""
    if INTERPRETED:
        return interpreted_tile(n, 256), 1, 4, 3, 0
    if (n, k) in TUNED:
        return TUNED[(n, k)]
    block_n = 64
    tiles = triton.cdiv(n, block_n)
    groups = k // GROUP
    split = 1
    while tiles * split < 128 and split * 2 <= groups:
        split *= 2
    return block_n, split, 4, 3, 0


def _check(x, w_q, w_s):
    M, K = x.shape
    N = w_q.shape[0]
    assert K % GROUP == 0 and w_q.shape[1] == K and w_q.dtype == torch.float8_e4m3fn and w_q.is_contiguous()
    assert w_s.shape == (triton.cdiv(N, GROUP), K // GROUP) and w_s.dtype == torch.float32 and w_s.is_contiguous()
    assert x.dtype == torch.bfloat16 and x.stride(1) == 1
    return M, N, K


def quant_group128_fp8(x: torch.Tensor, out_q=None, out_s=None):
    M, K = x.shape
    G = K // GROUP
    if not use_triton(x):
        qa, sa = reference.quant_group128_fp8(x)
        return into(out_q, qa), into(out_s, sa)
    qa = out_q if out_q is not None else torch.empty((M, K), dtype=torch.float8_e4m3fn, device=x.device)
    sa = out_s if out_s is not None else torch.empty((M, G), dtype=torch.float32, device=x.device)
    block_g = min(32, triton.next_power_of_2(G))
    quant_group128_kernel[(M, triton.cdiv(G, block_g))](x, x.stride(0), qa, sa, M, K, G,
                                                         BLOCK_G=block_g, INTERPRET=INTERPRETED, num_warps=4)
    return qa, sa


def _gemm(x, qa, sa, w_q, w_s, out, fused: bool, config=None):
    M, N, K = _check(x, w_q, w_s)
    G = K // GROUP
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    block_n, split, warps, stages, *rest = config or default_config(N, K)
    g_per = triton.cdiv(G, split)
    split = triton.cdiv(G, g_per)  # no empty splits
    unroll = g_per if (rest and rest[0]) else 0
    tiles = triton.cdiv(N, block_n)
    if split > 1:
        ws = torch.empty((split, BLOCK_M, N), dtype=torch.float32, device=x.device)
        cnt = arrival_counters(x.device, tiles)
    else:
        ws = cnt = out  # unused
    pdl = pdl_enabled(x)
    qa_arg = qa if qa is not None else x
    sa_arg = sa if sa is not None else w_s
    fp8_block_gemm_kernel[(tiles, split)](
        x, x.stride(0), qa_arg, sa_arg, w_q, w_s, ws, cnt, out, out.stride(0),
        M, N, K, G, g_per,
        FUSED_QUANT=fused, BLOCK_M=BLOCK_M, BLOCK_N=block_n, SPLIT_K=split, INTERPRET=INTERPRETED,
        UNROLL=unroll, PDL=pdl, num_warps=warps, num_stages=stages, **({"launch_pdl": True} if pdl else {}),
    )
    return out


def fp8_block_linear_stock(x, w_q, w_s, out=None, config=None) -> torch.Tensor:
    """Stock path (R9K_FP8_QA=0): the quant launch, then the GEMM launch per 16-row tile."""
    if not use_triton(x):
        return reference.fp8_block_linear(x, w_q, w_s, out=out)
    M = x.shape[0]
    if out is None:
        out = torch.empty((M, w_q.shape[0]), dtype=torch.bfloat16, device=x.device)
    if M == 0:
        return out
    qa, sa = quant_group128_fp8(x)
    for m0 in range(0, M, BLOCK_M):
        m1 = min(M, m0 + BLOCK_M)
        _gemm(x[m0:m1], qa[m0:m1], sa[m0:m1], w_q, w_s, out[m0:m1], fused=False, config=config)
    return out


def fp8_block_linear(x, w_q, w_s, out=None, config=None) -> torch.Tensor:
    """Fused path (R9K_FP8_QA=1): one launch for 1 <= M <= 16, else the stock path (same bits)."""
    M = x.shape[0]
    if not use_triton(x):
        return reference.fp8_block_linear(x, w_q, w_s, out=out)
    if not 1 <= M <= MAX_M:
        return fp8_block_linear_stock(x, w_q, w_s, out=out, config=config)
    return _gemm(x, None, None, w_q, w_s, out, fused=True, config=config)
