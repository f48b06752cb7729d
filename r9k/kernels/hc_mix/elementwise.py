"""The stock hyper-connection mix's two elementwise kernels in Triton (docs/semantics.md 3.1):
``hc_silu_`` (step 2) and ``hc_gate_mix`` (step 4), with their PyTorch forms for where Triton does not run."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._out import into
from .._triton.common import INTERPRETED, to_bf16, use_triton


def hc_silu_torch_(buf: torch.Tensor, lora_rank: int = 320, hc_count: int = 4) -> torch.Tensor:
    a = buf[:, :lora_rank].float() / hc_count
    buf[:, :lora_rank] = (a * torch.sigmoid(a)).to(torch.bfloat16)
    return buf


def hc_gate_mix_torch(xn: torch.Tensor, gate: torch.Tensor, hc_count: int = 4, out=None) -> torch.Tensor:
    M = xn.shape[0]
    hd = xn.shape[1] // hc_count
    g = torch.sigmoid(gate.float().view(M, hc_count, hd))
    t = g * xn.float().reshape(M, hc_count, hd)
    acc = t[:, 0]
    for s in range(1, hc_count):  # stream order 0, 1, 2, 3
        acc = acc + t[:, s]
    return into(out, (acc * (1.0 / hc_count)).to(torch.bfloat16))


@triton.jit
def _sigmoid(g):
    return 1.0 / (1.0 + tl.exp(-g))


@triton.jit
def hc_silu_kernel(buf_ptr, stride_m, COLS, inv_hc, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    m = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < COLS
    v = tl.load(buf_ptr + m * stride_m + offs, mask=mask, other=0.0).to(tl.float32)
    a = v * inv_hc
    tl.store(buf_ptr + m * stride_m + offs, to_bf16(a / (1.0 + tl.exp(-a)), INTERPRET), mask=mask)


@triton.jit
def hc_gate_mix_kernel(xn_ptr, stride_x, g_ptr, stride_g, out_ptr, stride_o, HD,
                       BLOCK_D: tl.constexpr, INTERPRET: tl.constexpr):
    m = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = offs < HD
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in tl.static_range(4):
        g = tl.load(g_ptr + m * stride_g + s * HD + offs, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(xn_ptr + m * stride_x + s * HD + offs, mask=mask, other=0.0).to(tl.float32)
        acc = acc + _sigmoid(g) * x
    tl.store(out_ptr + m * stride_o + offs, to_bf16(acc * 0.25, INTERPRET), mask=mask)


def hc_silu_(buf: torch.Tensor, lora_rank: int = 320, hc_count: int = 4) -> torch.Tensor:
    """Stock step 2: hc_silu in place on ``buf[:, :lora_rank]`` (one launch where Triton runs)."""
    if not (use_triton(buf) and buf.stride(1) == 1) or buf.shape[0] == 0:
        return hc_silu_torch_(buf, lora_rank, hc_count)
    hc_silu_kernel[(buf.shape[0],)](buf, buf.stride(0), lora_rank, 1.0 / hc_count,
                                    BLOCK=triton.next_power_of_2(lora_rank), INTERPRET=INTERPRETED)
    return buf


def hc_gate_mix(xn: torch.Tensor, gate: torch.Tensor, hc_count: int = 4, out=None) -> torch.Tensor:
    """Stock step 4: ``bf16(0.25 * sum_s sigmoid(gate_s) * xn_s)`` (one launch where Triton runs)."""
    M = xn.shape[0]
    hd = xn.shape[1] // hc_count
    if not (use_triton(xn) and hc_count == 4 and xn.stride(1) == 1 and gate.stride(1) == 1) or M == 0:
        return hc_gate_mix_torch(xn, gate, hc_count, out=out)
    if out is None:
        out = torch.empty((M, hd), dtype=torch.bfloat16, device=xn.device)
    block_d = 1024
    hc_gate_mix_kernel[(M, triton.cdiv(hd, block_d))](xn, xn.stride(0), gate, gate.stride(0), out,
                                                      out.stride(0), hd, BLOCK_D=block_d,
                                                      INTERPRET=INTERPRETED)
    return out
