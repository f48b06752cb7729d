"""The skinny split-K GEMM of decode widths (M <= 16), shared by the MoE router and the hyper-connection down
GEMM: ``out = epi(bf16(scale[n] * sum_k x[m,k] * W[n,k]))``.

One 16-row tile; grid = (N tiles, K splits), so a 512- or 336-row weight (bf16, or e4m3 converted exactly to
bf16) is spread over ~100-200 programs. The split-K partials go to an fp32 workspace; the last program of an
N tile to arrive (acq_rel counter) sums them in split order, rounds once, runs the epilogue (none, or hc_silu
on the first ``EPI_COLS`` columns) and resets the counter (graph-safe, no memset launch)."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import tuned
from .common import INTERPRETED, dot_bf16, interpreted_tile, to_bf16
from .counters import arrival_counters
from .pdl import gdc_launch_dependents, gdc_wait, pdl_enabled, prefetch_l2

BLOCK_M = 16  # one tile of decode rows (MTP-3: 4 rows a request, so up to 4 requests)


@triton.jit
def _hc_silu(v, inv_hc):
    """a * sigmoid(a), a = v / hc, of the bf16-rounded GEMM value v."""
    a = v * inv_hc
    return a / (1.0 + tl.exp(-a))


@triton.jit
def _skinny_step(acc, k0, k_hi, x_ptr, w_ptr, offs_m, offs_n, offs_k, m_mask, n_mask, K, stride_xm,
                 INTERPRET: tl.constexpr):
    kk = k0 + offs_k
    k_mask = kk < k_hi
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
                mask=m_mask[:, None] & k_mask[None, :], other=0.0)
    w = tl.load(w_ptr + offs_n[:, None] * K + kk[None, :],
                mask=n_mask[:, None] & k_mask[None, :], other=0.0)
    # bf16 weights as they are; e4m3 weights converted exactly to bf16 (W8A16).
    return acc + dot_bf16(x.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), INTERPRET)


@triton.jit
def skinny_gemm_kernel(
    x_ptr, w_ptr, scale_ptr, ws_ptr, cnt_ptr, out_ptr,
    M, N, K, stride_xm, stride_om, K_PER_SPLIT,
    EPI_COLS, inv_hc,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    HAS_SCALE: tl.constexpr, EPI_SILU: tl.constexpr, INTERPRET: tl.constexpr, UNROLL: tl.constexpr = 0,
    PDL: tl.constexpr = False, W_BYTES: tl.constexpr = 2,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    k_lo = pid_k * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    if PDL:
        # weights are no predecessor's output: into the L2 (one prefetch per 128 bytes) before the wait
        LINE: tl.constexpr = 128 // W_BYTES
        NL: tl.constexpr = (BLOCK_K + LINE - 1) // LINE
        lines = tl.arange(0, NL) * LINE
        wrow = w_ptr + offs_n.to(tl.int64)[:, None] * K
        for k0 in range(k_lo, k_hi, BLOCK_K):
            kk = k0 + lines[None, :]
            prefetch_l2(tl.where(n_mask[:, None] & (kk < k_hi), wrow + kk, w_ptr))
        gdc_wait()
        gdc_launch_dependents()

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if UNROLL > 0:
        # UNROLL == K_PER_SPLIT / BLOCK_K: the split's chunks fully unrolled, every load issued up front.
        for i in tl.static_range(UNROLL):
            acc = _skinny_step(acc, k_lo + i * BLOCK_K, k_hi, x_ptr, w_ptr, offs_m, offs_n, offs_k, m_mask, n_mask,
                               K, stride_xm, INTERPRET)
    else:
        for k0 in range(k_lo, k_hi, BLOCK_K):
            acc = _skinny_step(acc, k0, k_hi, x_ptr, w_ptr, offs_m, offs_n, offs_k, m_mask, n_mask,
                               K, stride_xm, INTERPRET)

    out_mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K > 1:
        ws = ws_ptr + (pid_k * BLOCK_M + offs_m[:, None]) * N + offs_n[None, :]
        tl.store(ws, acc, mask=out_mask)
        tl.debug_barrier()  # every thread's partial is issued before the arrival is published
        arrived = tl.atomic_add(cnt_ptr + pid_n, 1)  # acq_rel, gpu scope
        # only the last program to arrive finishes the tile (masks, not a branch)
        out_mask = out_mask & ((tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.int32) + arrived) == SPLIT_K - 1)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        # fixed order: deterministic bits; unrolled so the last arriver issues every partial's load at once
        for s in tl.static_range(SPLIT_K):
            part = tl.load(ws_ptr + (s * BLOCK_M + offs_m[:, None]) * N + offs_n[None, :],
                           mask=out_mask, other=0.0, cache_modifier=".cg")
            acc += part
        tl.atomic_xchg(cnt_ptr + pid_n, 0, mask=arrived == SPLIT_K - 1)  # reset for the next call

    if HAS_SCALE:
        sc = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0)
        acc = acc * sc[None, :]
    y = to_bf16(acc, INTERPRET)
    if EPI_SILU:
        act = to_bf16(_hc_silu(y.to(tl.float32), inv_hc), INTERPRET)
        y = tl.where((offs_n < EPI_COLS)[None, :], act, y)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], y, mask=out_mask)


TUNED_FILE = tuned.tuned_path(os.path.dirname(__file__))  # this device's file (absent: default configs)


def load_tuned(path: str = TUNED_FILE) -> dict:
    """A device's sweep winners (the router and hc_mix benchmarks' ``--sweep``): {"skinny": {"NxK": [cfg]}}."""
    return tuned.read(path)


TUNED: dict = load_tuned()


def default_skinny_config(n: int, k: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages) for N x K: the device's sweep winner if
    recorded, else ~130-260 programs (132 SMs)."""
    if INTERPRETED:
        return interpreted_tile(n), interpreted_tile(k), 1, 4, 3
    cfg = TUNED.get("skinny", {}).get(f"{n}x{k}")
    if cfg:
        return tuple(cfg)
    block_n = 32 if n >= 512 else 16
    block_k = 128
    tiles = triton.cdiv(n, block_n)
    k_blocks = triton.cdiv(k, block_k)
    split = 1
    while tiles * split < 128 and split * 2 <= k_blocks:
        split *= 2
    return block_n, block_k, split, 4, 3


SKINNY_PDL = False


def skinny_gemm(x, w, *, scale=None, out=None, epi_cols: int = 0, hc_count: int = 4, config=None):
    """``out[m, n] = epi(bf16(scale[n] * sum_k x[m,k] * w[n,k]))`` for M <= 16 in one launch.

    x [M, K] bf16 (unit column stride), w [N, K] bf16 or float8_e4m3fn (contiguous), scale [N] fp32 or None.
    ``epi_cols > 0``: hc_silu (``silu(v / hc_count)``) on columns ``< epi_cols``. ``config``: (BLOCK_N, BLOCK_K,
    SPLIT_K, num_warps, num_stages[, unroll]); None = tuned or default."""
    M, K = x.shape
    N = w.shape[0]
    assert w.shape[1] == K and w.is_contiguous() and x.stride(1) == 1
    assert 1 <= M <= BLOCK_M, "skinny_gemm covers decode widths (M <= 16)"
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=x.device)
    block_n, block_k, split, warps, stages, *rest = config or default_skinny_config(N, K)
    k_per_split = triton.cdiv(triton.cdiv(K, split), block_k) * block_k
    split = triton.cdiv(K, k_per_split)  # no empty splits
    unroll = k_per_split // block_k if (rest and rest[0]) else 0
    tiles = triton.cdiv(N, block_n)
    # PDL off: slower over a decode step with the skinny GEMMs taking part (notes/kernels-decode-width.md)
    pdl = SKINNY_PDL and pdl_enabled(x)
    if split > 1:
        ws = torch.empty((split, BLOCK_M, N), dtype=torch.float32, device=x.device)
        cnt = arrival_counters(x.device, tiles)
    else:
        ws = cnt = out  # unused
    skinny_gemm_kernel[(tiles, split)](
        x, w, scale if scale is not None else out, ws, cnt, out,
        M, N, K, x.stride(0), out.stride(0), k_per_split,
        epi_cols, 1.0 / hc_count,
        BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split,
        HAS_SCALE=scale is not None, EPI_SILU=epi_cols > 0, INTERPRET=INTERPRETED, UNROLL=unroll,
        PDL=pdl, W_BYTES=w.element_size(), num_warps=warps, num_stages=stages,
        **({"launch_pdl": True} if pdl else {}),
    )
    return out
