"""Triton device helpers shared by every kernel.

``to_bf16`` / ``to_e4m3`` / ``dot_bf16`` take ``INTERPRET`` (a constexpr): Triton's CPU interpreter truncates
fp32 -> bf16, rounds fp32 -> e4m3 neither to nearest even nor with the exponent carry, and multiplies bf16
tiles as their raw bits, so under it these compute the GPU's values with integer/float arithmetic; on a GPU
they compile to the hardware instruction."""
from __future__ import annotations

import os

import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(t) -> bool:
    """Whether a Triton kernel can run on tensor ``t``: a GPU tensor, or any tensor under the interpreter."""
    return t.is_cuda or INTERPRETED


def interpreted_tile(n: int, cap: int = 1024) -> int:
    """The tile of a default config under the interpreter: as wide as ``n`` (a power of two, at most
    ``cap``): the interpreter pays per program, not per byte. The tests pin the GPU's narrow configs explicitly."""
    return min(triton.next_power_of_2(n), cap)


@triton.jit
def rne_bf16(v):
    """fp32 rounded to the nearest-even bf16 value, as fp32, on the bits (the interpreter's casts truncate):
    the same bits as ``cvt.rn.bf16.f32`` for finite values."""
    bits = v.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def to_bf16(v, INTERPRET: tl.constexpr):
    """fp32 -> bf16, round to nearest even (finite inputs; inf stays inf)."""
    if INTERPRET:
        b = v.to(tl.uint32, bitcast=True)
        r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        y = r.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        y = v.to(tl.bfloat16)
    return y


@triton.jit
def to_e4m3(v, INTERPRET: tl.constexpr):
    """fp32 -> float8_e4m3fn, round to nearest even, saturating at +-448 (finite inputs)."""
    if INTERPRET:
        b = v.to(tl.uint32, bitcast=True)
        sign = (b >> 31) << 7
        a = b & 0x7FFFFFFF
        # Normal range (|v| >= 2^-6): round the fp32 mantissa to 3 bits, RNE; the carry may bump
        # the exponent, which the code arithmetic below absorbs.
        rb = (a + 0x7FFFF + ((a >> 20) & 1)) >> 20
        code_n = rb - (120 << 3)
        # Subnormal range: multiples of 2^-9, RNE by the add-and-subtract trick (2^14 has ulp 2^-9).
        f = a.to(tl.float32, bitcast=True)
        r = (f + 16384.0) - 16384.0
        code_s = (r * 512.0).to(tl.uint32)
        code = tl.where(a >= (121 << 23), code_n, code_s)
        code = tl.minimum(code, 0x7E) | sign
        y = code.to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    else:
        y = v.to(tl.float8e4nv)
    return y


@triton.jit
def dot_bf16(a, b, INTERPRET: tl.constexpr):
    """bf16 x bf16 -> fp32 tile product (exact products, fp32 accumulation)."""
    if INTERPRET:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        r = tl.dot(a, b)
    return r
