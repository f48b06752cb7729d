"""Triton kernels of the compressed all-reduce's codec (the fused path of :mod:`.quant`): ``quantize``
(rotation by one fp32 ``tl.dot`` with the Hadamard matrix, absmax, codes and scales; the summation order
differs from :mod:`.quant`'s, so a value on a rounding boundary may take the neighbouring code) and
``dequant_sum`` (all ranks in one launch, in rank order). Packing the codes stays in :mod:`.quant`."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from . import quant

BM = 16  # blocks per program (tl.dot needs >= 16 rows)


@triton.jit
def _quantize_kernel(x_ptr, h_ptr, codes_ptr, scales_ptr, nb, inv_sqrt_b, qmax,
                     B: tl.constexpr, BM: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, B)
    rmask = rows < nb
    x = tl.load(x_ptr + rows[:, None] * B + cols[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    h = tl.load(h_ptr + cols[:, None] * B + cols[None, :])
    y = tl.dot(x, h, input_precision="ieee") * inv_sqrt_b
    amax = tl.max(tl.abs(y), axis=1)
    scale = amax / qmax
    safe = tl.where(scale > 0, scale, 1.0)
    inv = tl.where(scale > 0, 1.0 / safe, 0.0)
    c = tl.floor(y * inv[:, None] + 0.5)
    c = tl.minimum(tl.maximum(c, -qmax), qmax)
    tl.store(codes_ptr + rows[:, None] * B + cols[None, :], c.to(tl.int8), mask=rmask[:, None])
    tl.store(scales_ptr + rows, scale, mask=rmask)


@triton.jit
def _dequant_sum_kernel(codes_ptr, scales_ptr, h_ptr, out_ptr, nb, inv_sqrt_b, R: tl.constexpr,
                        B: tl.constexpr, BM: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, B)
    rmask = rows < nb
    h = tl.load(h_ptr + cols[:, None] * B + cols[None, :])
    acc = tl.zeros((BM, B), dtype=tl.float32)
    for r in tl.static_range(R):  # the ranks, in rank order (a compile-time count: one program per world size)
        c = tl.load(codes_ptr + r * nb * B + rows[:, None] * B + cols[None, :], mask=rmask[:, None], other=0)
        s = tl.load(scales_ptr + r * nb + rows, mask=rmask, other=0.0)
        y = c.to(tl.float32) * s[:, None]
        acc += tl.dot(y, h, input_precision="ieee") * inv_sqrt_b
    tl.store(out_ptr + rows[:, None] * B + cols[None, :], acc, mask=rmask[:, None])


def quantize(x: torch.Tensor, bits: int, block: int = quant.DEFAULT_BLOCK):
    """``(codes int8 [n_blocks, block], scales fp32 [n_blocks])``, as :func:`quant.quantize`."""
    q = quant.qmax(bits)
    blocks = quant.to_blocks(x, quant.check_block(block)).contiguous()
    if block < 16:
        raise ValueError("the Triton codec needs block >= 16 (tl.dot)")
    nb = blocks.shape[0]
    codes = torch.empty(nb, block, dtype=torch.int8, device=x.device)
    scales = torch.empty(nb, dtype=torch.float32, device=x.device)
    h = quant.hadamard(block, x.device)
    _quantize_kernel[(triton.cdiv(nb, BM),)](blocks, h, codes, scales, nb, 1.0 / math.sqrt(block), float(q),
                                             B=block, BM=BM)
    return codes, scales


def dequant_sum(codes_list, scales_list) -> torch.Tensor:
    """fp32 ``[n_blocks, block]``: the ranks' dequantized blocks added in list (rank) order."""
    codes = torch.stack([c.contiguous() for c in codes_list]).contiguous()
    scales = torch.stack([s.contiguous() for s in scales_list]).contiguous()
    R, nb, block = codes.shape
    out = torch.empty(nb, block, dtype=torch.float32, device=codes.device)
    h = quant.hadamard(block, codes.device)
    _dequant_sum_kernel[(triton.cdiv(nb, BM),)](codes, scales, h, out, nb, 1.0 / math.sqrt(block), R=R,
                                                B=block, BM=BM)
    return out


class TritonCodec:

    name = "fused"
    quantize = staticmethod(quantize)
    dequant_sum = staticmethod(dequant_sum)
