"""Stock path, exact reference and stated error bounds of the all-reduce variants (docs/semantics.md 3.12).

Stock: ``torch.distributed.all_reduce`` (NCCL on GPUs, gloo on the CPU). Bounds: exact schedules, the
fixed-order fp32 sum rounded once; compressed ones, per block in the L2 norm, ``sqrt(block) / 2`` times the
scales of every quantization on the block's path, plus the fp32 work of the rotations and the final rounding."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import quant

U32 = 2.0 ** -24


def all_reduce_stock(x: torch.Tensor, group=None) -> torch.Tensor:
    """The library's all-reduce (out of place)."""
    y = x.clone()
    dist.all_reduce(y, group=group)
    return y


def exact_sum(xs) -> torch.Tensor:
    acc = xs[0].double().clone()
    for x in xs[1:]:
        acc += x.double()
    return acc


def exact_schedule_bound(xs, dtype) -> torch.Tensor:
    """Per-element bound of a fixed-order fp32 sum rounded to ``dtype``, against :func:`exact_sum`."""
    mag = sum(x.double().abs() for x in xs)
    s = exact_sum(xs).abs()
    half_ulp = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[dtype]
    return (len(xs) - 1) * U32 * mag + half_ulp * (s + (len(xs) - 1) * U32 * mag) + 1e-300


def _blocks(x, block):
    return quant.to_blocks(x, block).double()


def _q_terms(v_fp32: torch.Tensor, bits: int, block: int):
    _, scales = quant.quantize(v_fp32, bits, block)
    l1 = quant.to_blocks(v_fp32, block).double().abs().sum(1)
    return scales.double(), l1


def error_bound(xs, schedule: str, bits: int, block: int = quant.DEFAULT_BLOCK, dtype=torch.float32):
    """Per-block L2 bound ``[n_blocks]`` of a compressed schedule's result against :func:`exact_sum`,
    blocks taken over the flattened message (the layout of the schedule's own blocks)."""
    world = len(xs)
    n = xs[0].numel()
    rt = math.sqrt(block)
    flats = [x.reshape(-1).float() for x in xs]
    fp32 = 4 * block * U32
    if schedule == "compressed_one_shot":
        # forward and inverse rotation of each rank's message
        quant_sum = sum(rt / 2 * s + fp32 * 2 * l1 for s, l1 in (_q_terms(f, bits, block) for f in flats))
        result = _blocks(exact_sum(xs), block).norm(dim=1)
        return quant_sum + 2.0 ** -8 * (result + quant_sum) * (dtype != torch.float32)
    if schedule == "compressed_two_shot":
        c = math.ceil(max(1, math.ceil(n / world)) / block) * block
        pad = [torch.cat([f, f.new_zeros(c * world - n)]) for f in flats]
        bound = torch.zeros(c * world // block, dtype=torch.float64)
        bpc = c // block
        for owner in range(world):
            lo, hi = owner * c, (owner + 1) * c
            partial = torch.zeros(c, dtype=torch.float32)
            b = torch.zeros(bpc, dtype=torch.float64)
            for r in range(world):
                seg = pad[r][lo:hi]
                if r == owner:
                    partial += seg
                    continue
                s, l1 = _q_terms(seg, bits, block)
                b += rt / 2 * s + fp32 * 2 * l1
                partial += quant.dequantize(*quant.quantize(seg, bits, block)).reshape(-1)
            s, l1 = _q_terms(partial, bits, block)
            b += rt / 2 * s + fp32 * 2 * l1 + world * U32 * quant.to_blocks(
                sum(p[lo:hi].double().abs() for p in pad).float(), block).double().norm(dim=1)
            bound[owner * bpc:(owner + 1) * bpc] = b
        return _trim(bound, n, block, xs, dtype)
    if schedule == "hier4":
        if world != 4:
            raise ValueError("hier4 needs 4 ranks")
        c = math.ceil(max(1, math.ceil(n / 2)) / block) * block
        pad = [torch.cat([f, f.new_zeros(2 * c - n)]) for f in flats]
        bound = torch.zeros(2 * c // block, dtype=torch.float64)
        for half in range(2):
            lo, hi = half * c, (half + 1) * c
            b = torch.zeros(c // block, dtype=torch.float64)
            for pair in range(2):
                p_sum = pad[2 * pair][lo:hi].clone()
                p_sum += pad[2 * pair + 1][lo:hi]
                s, l1 = _q_terms(p_sum, bits, block)
                b += rt / 2 * s + fp32 * 2 * l1 + U32 * quant.to_blocks(
                    (pad[2 * pair][lo:hi].abs() + pad[2 * pair + 1][lo:hi].abs()), block).double().norm(dim=1)
            bound[half * (c // block):(half + 1) * (c // block)] = b
        return _trim(bound, n, block, xs, dtype)
    raise ValueError(f"no bound for schedule {schedule!r}")


def _trim(bound, n, block, xs, dtype):
    """Re-block a bound laid out over the padded schedule to the message's own blocks (chunks are whole
    blocks, so block i of the message is block i of the layout)."""
    nb = max(1, math.ceil(n / block))
    b = bound[:nb]
    if dtype != torch.float32:
        result = _blocks(exact_sum(xs), block).norm(dim=1)
        b = b + 2.0 ** -8 * (result + b)
    return b


def block_errors(out: torch.Tensor, xs, block: int = quant.DEFAULT_BLOCK) -> torch.Tensor:
    """Per-block L2 error of ``out`` against :func:`exact_sum` (fp64)."""
    return (_blocks(out, block) - _blocks(exact_sum(xs), block)).norm(dim=1)


def rel_rms(out: torch.Tensor, xs) -> float:
    ref = exact_sum(xs)
    return float((out.double() - ref).norm() / ref.norm().clamp_min(1e-300))
