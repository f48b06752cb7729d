"""The shared expert's Triton building blocks (docs/semantics.md 3.6), launched by both of its paths (kept
apart so that the stock path never imports the fused module).

The MXFP4 GEMM decodes e2m1 codes and the E8M0 exponent to exact bf16 values in registers and runs bf16
``tl.dot`` with fp32 accumulation (exact products: only the summation order can differ). Every rounding to
bf16 / e4m3 is done on the bits, so the CPU interpreter, whose casts truncate, gives the GPU's values."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .._triton.common import INTERPRETED, interpreted_tile, rne_bf16
from .._triton.counters import arrival_counters


@triton.jit
def rne_e4m3(v):
    """fp32 rounded to the nearest-even OCP e4m3fn value (saturating at +-448), as fp32."""
    bits = v.to(tl.int32, bitcast=True)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576).to(tl.float32, bitcast=True)  # 3 mantissa bits
    sub = (v + 24576.0) - 24576.0  # below 2^-6 the e4m3 grid is 2^-9: the add rounds to it (ties to even)
    sub = (sub.to(tl.int32, bitcast=True) | ((bits >> 31) << 31)).to(tl.float32, bitcast=True)  # keep -0
    r = tl.where(tl.abs(v) < 0.015625, sub, normal)
    return tl.minimum(tl.maximum(r, -448.0), 448.0)


@triton.jit
def _row_quant_kernel(x_ptr, q_ptr, s_ptr, wg_ptr, g_ptr, K, s_x, s_q, BLOCK_K: tl.constexpr,
                      HAS_GATE: tl.constexpr):
    m = tl.program_id(0)
    k = tl.arange(0, BLOCK_K)
    mk = k < K
    x = tl.load(x_ptr + m * s_x + k, mask=mk, other=0.0).to(tl.float32)
    A = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-12)
    inv = tl.math.div_rn(448.0, A)
    tl.store(q_ptr + m * s_q + k, rne_e4m3(x * inv).to(tl.float8e4nv), mask=mk)
    tl.store(s_ptr + m, tl.math.div_rn(A, 448.0))
    if HAS_GATE:
        wg = tl.load(wg_ptr + k, mask=mk, other=0.0).to(tl.float32)
        gl = rne_bf16(tl.sum(x * wg, axis=0))
        g = rne_bf16(tl.math.div_rn(1.0, 1.0 + tl.exp(-gl)))
        tl.store(g_ptr + m, g)


@triton.jit
def _silu_mul_kernel(gu_ptr, o_ptr, s_ptr, I, s_gu, s_o, BLOCK_I: tl.constexpr, QUANT: tl.constexpr):
    m = tl.program_id(0)
    i = tl.arange(0, BLOCK_I)
    mi = i < I
    g = tl.load(gu_ptr + m * s_gu + i, mask=mi, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + m * s_gu + I + i, mask=mi, other=0.0).to(tl.float32)
    v = tl.math.div_rn(g, 1.0 + tl.exp(-g)) * u
    if QUANT:
        A = tl.maximum(tl.max(tl.abs(v), axis=0), 1e-12)
        inv = tl.math.div_rn(448.0, A)
        tl.store(o_ptr + m * s_o + i, rne_e4m3(v * inv).to(tl.float8e4nv), mask=mi)
        tl.store(s_ptr + m, tl.math.div_rn(A, 448.0))
    else:
        tl.store(o_ptr + m * s_o + i, rne_bf16(v).to(tl.bfloat16), mask=mi)


@triton.jit
def _mxfp4_decode(c, E):
    """e2m1 code c (int32 0..15) times 2^(E-127) (E: int32 E8M0, 2..254) -> fp32, built on the bits (exact)."""
    e = (c >> 1) & 3
    m = c & 1
    bits = tl.where(e == 0, tl.where(m == 1, (E - 1) << 23, 0), ((e - 1 + E) << 23) | (m << 22))
    bits = bits | ((c >> 3) << 31)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _mxfp4_gemm_kernel(a_ptr, sa_ptr, w_ptr, ws_ptr, g_ptr, o_ptr, part_ptr, cnt_ptr, M, N, K, K_SPLIT,
                       s_am, s_wn, s_wsn, s_om,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       SPLIT_K: tl.constexpr, HAS_GATE: tl.constexpr, DOT_F32: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mm = rm < M
    mn = rn < N
    HB: tl.constexpr = BLOCK_K // 2  # packed bytes per step
    jb = tl.arange(0, HB)
    k_lo = pid_k * K_SPLIT // 2
    k_hi = tl.minimum(k_lo + K_SPLIT // 2, K // 2)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(k_lo, k_hi, HB):
        kb = k0 + jb
        mk = kb < k_hi
        wmask = mn[:, None] & mk[None, :]
        wb = tl.load(w_ptr + rn[:, None] * s_wn + kb[None, :], mask=wmask, other=0).to(tl.int32)
        E = tl.load(ws_ptr + rn[:, None] * s_wsn + (kb // 16)[None, :], mask=wmask, other=127).to(tl.int32)
        w_lo = _mxfp4_decode(wb & 15, E)  # elements 2j (exact in bf16)
        w_hi = _mxfp4_decode(wb >> 4, E)  # elements 2j+1
        amask = mm[:, None] & mk[None, :]
        a_row = a_ptr + rm[:, None] * s_am + 2 * kb[None, :]
        a_even = tl.load(a_row, mask=amask, other=0.0).to(tl.float32)
        a_odd = tl.load(a_row + 1, mask=amask, other=0.0).to(tl.float32)
        if DOT_F32:  # the CPU interpreter's dot cannot take bf16 operands; fp32 holds the same exact values
            acc += tl.dot(a_even, tl.trans(w_lo), input_precision="ieee")
            acc += tl.dot(a_odd, tl.trans(w_hi), input_precision="ieee")
        else:
            acc += tl.dot(a_even.to(tl.bfloat16), tl.trans(w_lo.to(tl.bfloat16)))
            acc += tl.dot(a_odd.to(tl.bfloat16), tl.trans(w_hi.to(tl.bfloat16)))
    omask = mm[:, None] & mn[None, :]
    if SPLIT_K > 1:
        # split-K: the last program of this tile to arrive (acq_rel counter) sums the partials in split order
        poff = rm[:, None] * N + rn[None, :]
        tl.store(part_ptr + pid_k * M * N + poff, acc, mask=omask)
        tile = pid_m * tl.num_programs(0) + pid_n
        cnt = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
        if cnt == SPLIT_K - 1:
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            for sk in range(0, SPLIT_K):
                acc += tl.load(part_ptr + sk * M * N + poff, mask=omask, other=0.0, cache_modifier=".cg")
            sa = tl.load(sa_ptr + rm, mask=mm, other=0.0)
            res = acc * sa[:, None]
            if HAS_GATE:
                res = res * tl.load(g_ptr + rm, mask=mm, other=0.0)[:, None]
            tl.store(o_ptr + rm[:, None] * s_om + rn[None, :], rne_bf16(res).to(tl.bfloat16), mask=omask)
            tl.store(cnt_ptr + tile, 0)
    else:
        sa = tl.load(sa_ptr + rm, mask=mm, other=0.0)
        res = acc * sa[:, None]
        if HAS_GATE:
            res = res * tl.load(g_ptr + rm, mask=mm, other=0.0)[:, None]
        tl.store(o_ptr + rm[:, None] * s_om + rn[None, :], rne_bf16(res).to(tl.bfloat16), mask=omask)


# ---------------------------------------------------------------------------------------------- wrappers
def _gemm_config(M, N, K):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, SPLIT_K) for decode widths: the e2m1 decode
    is work proportional to the weight, so it is spread over ~100+ programs (narrow N tiles, split-K for the
    2560-deep gate_up GEMM); under the interpreter one wide tile."""
    if INTERPRETED:
        return 16, interpreted_tile(N, 256), max(64, interpreted_tile(K)), 4, 2, 1
    block_k = 256 if K >= 256 else max(64, triton.next_power_of_2(K))
    block_n = 16 if N <= 1024 else 32
    n_tiles = triton.cdiv(N, block_n) * triton.cdiv(M, 16)
    k_steps = triton.cdiv(K, block_k)
    split = 1
    while split * 2 <= k_steps and n_tiles * split < 128:
        split *= 2
    return 16, block_n, block_k, 4, 2, split


def mxfp4_gemm(q: torch.Tensor, s: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
               gate: torch.Tensor | None = None, out: torch.Tensor | None = None, config=None) -> torch.Tensor:
    """``out[m, n] = bf16(sum_k q[m,k] W[n,k] * s[m] [* gate[m]])``; q [M, K] e4m3, s/gate [M] fp32, W MXFP4.
    With SPLIT_K > 1 the partials are added in a fixed order (deterministic); calls on concurrent streams must
    not overlap (shared arrival counters)."""
    M, K = q.shape
    N = packed.shape[0]
    if K % 32 or packed.shape[1] * 2 != K or q.stride(-1) != 1:
        raise ValueError("K must be a multiple of 32 matching the packed weight, q's last dim contiguous")
    if out is None:
        out = torch.empty((M, N), dtype=torch.bfloat16, device=q.device)
    bm, bn, bk, nw, ns, split = config or _gemm_config(M, N, K)
    k_steps = triton.cdiv(K, bk)
    split = max(1, min(split, k_steps))
    k_split = triton.cdiv(k_steps, split) * bk  # elements of K per split (a multiple of BLOCK_K)
    split = triton.cdiv(K, k_split)
    grid = (triton.cdiv(N, bn), triton.cdiv(M, bm), split)
    if split > 1:
        part = torch.empty((split, M, N), dtype=torch.float32, device=q.device)
        cnt = arrival_counters(q.device, grid[0] * grid[1], user="shared_expert")
    else:
        part, cnt = out, s  # unused
    _mxfp4_gemm_kernel[grid](q, s, packed, scales, gate if gate is not None else s, out, part, cnt, M, N, K, k_split,
                             q.stride(0), packed.stride(0), scales.stride(0), out.stride(0),
                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, HAS_GATE=gate is not None,
                             DOT_F32=os.environ.get("TRITON_INTERPRET") == "1", num_warps=nw, num_stages=ns)
    return out


def _row_quant(x, wg=None):
    M, K = x.shape
    if x.stride(-1) != 1:
        raise ValueError("x's last dim must be contiguous")
    q = torch.empty((M, K), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((M,), dtype=torch.float32, device=x.device)
    g = torch.empty((M,), dtype=torch.float32, device=x.device) if wg is not None else s
    bk = triton.next_power_of_2(K)
    _row_quant_kernel[(M,)](x, q, s, wg if wg is not None else x, g, K, x.stride(0), q.stride(0), BLOCK_K=bk,
                            HAS_GATE=wg is not None, num_warps=4 if bk >= 2048 else 2)
    return q, s, g


def row_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row fp8 quant (appendix B): (q e4m3 [M, K], s fp32 [M]). One launch."""
    q, s, _ = _row_quant(x)
    return q, s


def row_quant_gate(x: torch.Tensor, wg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row fp8 quant of x plus the expert gate ``bf16(sigmoid(bf16(x . wg)))`` as fp32 [M]. One launch."""
    return _row_quant(x, wg)


def _silu(gu, quant):
    M, two_i = gu.shape
    I = two_i // 2
    if quant:
        o = torch.empty((M, I), dtype=torch.float8_e4m3fn, device=gu.device)
        s = torch.empty((M,), dtype=torch.float32, device=gu.device)
    else:
        o = torch.empty((M, I), dtype=torch.bfloat16, device=gu.device)
        s = o
    _silu_mul_kernel[(M,)](gu, o, s, I, gu.stride(0), o.stride(0), BLOCK_I=triton.next_power_of_2(I),
                           QUANT=quant, num_warps=1)
    return o, s


def silu_and_mul(gu: torch.Tensor) -> torch.Tensor:
    """Stock step 3: ``bf16(silu(gate) * up)`` [M, I] from gu [M, 2I] bf16. One launch."""
    return _silu(gu, False)[0]


def silu_mul_quant(gu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused step 3: ``silu(gate) * up`` in fp32, then its per-row fp8 quant: (q [M, I] e4m3, s [M])."""
    return _silu(gu, True)
