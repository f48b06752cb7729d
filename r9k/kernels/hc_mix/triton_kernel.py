"""Fused hyper-connection input mix in Triton: 2 launches instead of stock's 4, bf16 or fp8 weights.

* Down + hc_silu: the skinny split-K GEMM (10240 -> 336) with the hc_silu epilogue on the first ``lora_rank``
  columns, from the bf16-rounded value where stock rounds; fp8 weights as exact bf16, the per-row scale once.
* Up + gated mean (``hc_up_mix_kernel``): a program owns ``BLOCK_D`` output dims and the four weight rows
  ``s*HD + d`` of each; the four dots in fp32, each rounded to bf16 (stock's GEMM output), sigmoid, times
  ``xn``, added in stream order, scaled by 1/4, rounded once. The [M, 10240] gate never touches memory."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .._triton import tuned
from .._triton.common import INTERPRETED, dot_bf16, interpreted_tile, to_bf16, use_triton
from .._triton.skinny_gemm import BLOCK_M, skinny_gemm

from . import reference
from .elementwise import _sigmoid

MAX_M = 16  # fused for 1 <= M <= 16 (one 16-row tile); above: the stock sequence


@triton.jit
def _gate_term(acc, s_ptr, rows, d_mask, xn_ptr, xn_off, x_mask,
               HAS_SCALE: tl.constexpr, INTERPRET: tl.constexpr):
    if HAS_SCALE:
        sc = tl.load(s_ptr + rows, mask=d_mask, other=0.0)
        acc = acc * sc[None, :]
    g = to_bf16(acc, INTERPRET).to(tl.float32)
    xv = tl.load(xn_ptr + xn_off, mask=x_mask, other=0.0).to(tl.float32)
    return _sigmoid(g) * xv


@triton.jit
def _up_step(acc0, acc1, acc2, acc3, r0, lora_ptr, stride_lm, w_ptr, offs_m, offs_d, offs_r, m_mask, d_mask,
             HD, R, INTERPRET: tl.constexpr):
    rr = r0 + offs_r
    r_mask = rr < R
    lo = tl.load(lora_ptr + offs_m[:, None] * stride_lm + rr[None, :],
                 mask=m_mask[:, None] & r_mask[None, :], other=0.0).to(tl.bfloat16)
    wm = d_mask[:, None] & r_mask[None, :]
    wp = w_ptr + offs_d[:, None] * R + rr[None, :]
    w0 = tl.load(wp, mask=wm, other=0.0).to(tl.bfloat16)
    w1 = tl.load(wp + HD * R, mask=wm, other=0.0).to(tl.bfloat16)
    w2 = tl.load(wp + 2 * HD * R, mask=wm, other=0.0).to(tl.bfloat16)
    w3 = tl.load(wp + 3 * HD * R, mask=wm, other=0.0).to(tl.bfloat16)
    acc0 += dot_bf16(lo, tl.trans(w0), INTERPRET)
    acc1 += dot_bf16(lo, tl.trans(w1), INTERPRET)
    acc2 += dot_bf16(lo, tl.trans(w2), INTERPRET)
    acc3 += dot_bf16(lo, tl.trans(w3), INTERPRET)
    return acc0, acc1, acc2, acc3


@triton.jit
def hc_up_mix_kernel(
    lora_ptr, stride_lm, w_ptr, s_ptr, xn_ptr, stride_xm, out_ptr, stride_om,
    M, HD, R,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
    HAS_SCALE: tl.constexpr, INTERPRET: tl.constexpr, UNROLL: tl.constexpr = 0,
):
    pid = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = pid * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_r = tl.arange(0, BLOCK_R)
    m_mask = offs_m < M
    d_mask = offs_d < HD
    acc0 = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if UNROLL > 0:  # UNROLL == cdiv(R, BLOCK_R): all chunks unrolled, every load issued up front
        for i in tl.static_range(UNROLL):
            acc0, acc1, acc2, acc3 = _up_step(acc0, acc1, acc2, acc3, i * BLOCK_R, lora_ptr, stride_lm, w_ptr,
                                              offs_m, offs_d, offs_r, m_mask, d_mask, HD, R, INTERPRET)
    else:
        for r0 in range(0, R, BLOCK_R):
            acc0, acc1, acc2, acc3 = _up_step(acc0, acc1, acc2, acc3, r0, lora_ptr, stride_lm, w_ptr,
                                              offs_m, offs_d, offs_r, m_mask, d_mask, HD, R, INTERPRET)
    x_mask = m_mask[:, None] & d_mask[None, :]
    xo = offs_m[:, None] * stride_xm + offs_d[None, :]
    t0 = _gate_term(acc0, s_ptr, offs_d, d_mask, xn_ptr, xo, x_mask, HAS_SCALE, INTERPRET)
    t1 = _gate_term(acc1, s_ptr, offs_d + HD, d_mask, xn_ptr, xo + HD, x_mask, HAS_SCALE, INTERPRET)
    t2 = _gate_term(acc2, s_ptr, offs_d + 2 * HD, d_mask, xn_ptr, xo + 2 * HD, x_mask, HAS_SCALE, INTERPRET)
    t3 = _gate_term(acc3, s_ptr, offs_d + 3 * HD, d_mask, xn_ptr, xo + 3 * HD, x_mask, HAS_SCALE, INTERPRET)
    y = ((t0 + t1) + t2) + t3
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_d[None, :], to_bf16(y * 0.25, INTERPRET), mask=x_mask)


# Tile of the up+mix kernel: (BLOCK_D, BLOCK_R, num_warps, num_stages); a sweep's winner in tuned_<device>.json
TUNED_FILE = tuned.tuned_path(os.path.dirname(__file__))  # this device's file (absent: default configs)
UP_CONFIG = tuple(tuned.read(TUNED_FILE).get("up_mix", (16, 64, 4, 3)))  # default: 2560 / 16 = 160 programs
# Down GEMM tiles (BLOCK_N, BLOCK_K, SPLIT_K, warps, stages); None = the skinny GEMM's default.
DOWN_CONFIG = None


def _up_mix(lora, w_up, up_scale, xn, out, hc_count, config=None):
    M, R = lora.shape
    hd = xn.shape[1] // hc_count
    assert hc_count == 4, "the fused up+mix kernel is written for 4 streams"
    assert w_up.shape == (hc_count * hd, R) and w_up.is_contiguous()
    assert lora.stride(1) == 1 and xn.stride(1) == 1
    if out is None:
        out = torch.empty((M, hd), dtype=torch.bfloat16, device=xn.device)
    interp = (interpreted_tile(hd, 256), interpreted_tile(R), 4, 3) if INTERPRETED else None
    block_d, block_r, warps, stages, *rest = config or interp or UP_CONFIG
    unroll = triton.cdiv(R, block_r) if (rest and rest[0]) else 0
    hc_up_mix_kernel[(triton.cdiv(hd, block_d),)](
        lora, lora.stride(0), w_up, up_scale if up_scale is not None else w_up, xn, xn.stride(0),
        out, out.stride(0), M, hd, R,
        BLOCK_M=BLOCK_M, BLOCK_D=block_d, BLOCK_R=block_r,
        HAS_SCALE=up_scale is not None, INTERPRET=INTERPRETED, UNROLL=unroll,
        num_warps=warps, num_stages=stages,
    )
    return out


def _fused(xn, hc_count) -> bool:
    return use_triton(xn) and 1 <= xn.shape[0] <= MAX_M and xn.stride(1) == 1 and hc_count == 4


def _two_launches(xn, w_down, down_s, w_up, up_s, out_buf, out_block, lora_rank, hc_count, down_config, up_config):
    buf = skinny_gemm(xn, w_down, scale=down_s, out=out_buf, epi_cols=lora_rank, hc_count=hc_count,
                      config=down_config or DOWN_CONFIG)
    return buf, _up_mix(buf[:, :lora_rank], w_up, up_s, xn, out_block, hc_count, up_config)


def hc_mix(xn, w_down, w_up, out_buf=None, out_block=None, *, lora_rank: int = 320, hc_count: int = 4,
           down_config=None, up_config=None):
    """Fused hyper-connection input mix (bf16 weights), 2 launches for 1 <= M <= 16; the signature and outputs of
    ``reference.hc_mix``, which runs above 16 rows, without Triton or for a stream count other than 4."""
    if not _fused(xn, hc_count):
        return reference.hc_mix(xn, w_down, w_up, out_buf, out_block, lora_rank=lora_rank, hc_count=hc_count)
    return _two_launches(xn, w_down, None, w_up, None, out_buf, out_block, lora_rank, hc_count, down_config,
                         up_config)


def hc_mix_fp8(xn, down_q, down_s, up_q, up_s, out_buf=None, out_block=None, *,
               lora_rank: int = 320, hc_count: int = 4, down_config=None, up_config=None):
    """Fused mix on the fp8 copies of ``prepare_hc_fp8`` (W8A16), 2 launches for 1 <= M <= 16; elsewhere the
    plain-PyTorch W8A16 reference (same semantics)."""
    if not _fused(xn, hc_count):
        return reference.hc_mix_fp8(xn, down_q, down_s, up_q, up_s, out_buf, out_block,
                                    lora_rank=lora_rank, hc_count=hc_count)
    return _two_launches(xn, down_q, down_s, up_q, up_s, out_buf, out_block, lora_rank, hc_count, down_config,
                         up_config)


prepare_hc_fp8 = reference.prepare_hc_fp8
hc_fp8_bytes = reference.hc_fp8_bytes
