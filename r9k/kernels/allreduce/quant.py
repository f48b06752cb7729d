"""The compressed all-reduce's wire format, in plain PyTorch (the reference codec).

A message is cut into blocks of ``block`` elements (a power of two, the last zero-padded); each block is
rotated by the orthonormal Walsh-Hadamard matrix ``H / sqrt(block)`` (an outlier spreads over the block instead
of setting a coarse scale for its neighbours), then quantized symmetrically: ``scale = max|y| / qmax``,
``code = floor(y / scale + 1/2)`` clamped to ``[-qmax, qmax]``, ``qmax = 2**(bits-1) - 1``. The wire carries
the codes packed at ``bits`` bits and one fp32 scale a block. A block's dequantized values are within
``sqrt(block) * scale / 2`` of the input in the L2 norm (:func:`.reference.error_bound` adds these up)."""
from __future__ import annotations

import math

import torch

#: Code widths the wire supports (the registry's R9K_AR_QUANT_BITS / R9K_AR4_BITS choices are 4 and 6).
BITS = (4, 6, 8)
DEFAULT_BLOCK = 128


def qmax(bits: int) -> int:
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    return (1 << (bits - 1)) - 1


def check_block(block: int) -> int:
    if block < 2 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 2, got {block}")
    return block


_HADAMARD: dict[tuple[int, str], torch.Tensor] = {}


def hadamard(block: int, device="cpu") -> torch.Tensor:
    """The Sylvester Hadamard matrix of order ``block`` (entries +-1, symmetric), fp32."""
    check_block(block)
    key = (block, str(device))
    h = _HADAMARD.get(key)
    if h is None:
        h = torch.ones(1, 1)
        while h.shape[0] < block:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        h = h.to(device=device, dtype=torch.float32)
        _HADAMARD[key] = h
    return h


def to_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    flat = x.reshape(-1).float()
    n = flat.numel()
    nb = max(1, math.ceil(n / block))
    if nb * block != n:
        flat = torch.cat([flat, flat.new_zeros(nb * block - n)])
    return flat.view(nb, block)


def rotate(blocks: torch.Tensor) -> torch.Tensor:
    b = blocks.shape[-1]
    return (blocks @ hadamard(b, blocks.device)) * (1.0 / math.sqrt(b))


def quantize(x: torch.Tensor, bits: int, block: int = DEFAULT_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``(codes int8 [n_blocks, block], scales fp32 [n_blocks])`` of ``x`` (any shape, any float dtype)."""
    q = qmax(bits)
    y = rotate(to_blocks(x, check_block(block)))
    amax = y.abs().amax(dim=1)
    scales = amax / q
    inv = torch.where(scales > 0, 1.0 / torch.where(scales > 0, scales, torch.ones_like(scales)),
                      torch.zeros_like(scales))
    codes = torch.floor(y * inv[:, None] + 0.5).clamp_(-q, q).to(torch.int8)
    return codes, scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """fp32 ``[n_blocks, block]``: the rotation undone on ``codes * scale`` (H / sqrt(b) is its own inverse)."""
    return rotate(codes.float() * scales[:, None])


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes ([-qmax, qmax], int8) packed at ``bits`` bits each into a flat uint8 tensor (little end first)."""
    q = qmax(bits)
    u = (codes.reshape(-1).to(torch.int32) + q + 1)  # 1 .. 2q+1, fits in `bits` bits
    if bits == 8:
        return u.to(torch.uint8)
    per = 8 // math.gcd(8, bits)          # codes per group: 2 for 4-bit, 4 for 6-bit
    nbytes = per * bits // 8              # bytes per group: 1 and 3
    pad = (-u.numel()) % per
    if pad:
        u = torch.cat([u, u.new_zeros(pad)])
    g = u.view(-1, per)
    word = torch.zeros(g.shape[0], dtype=torch.int64, device=codes.device)
    for i in range(per):
        word |= g[:, i].to(torch.int64) << (bits * i)
    out = torch.stack([(word >> (8 * j)) & 0xFF for j in range(nbytes)], 1)
    return out.to(torch.uint8).reshape(-1)


def unpack(data: torch.Tensor, bits: int, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack`: ``numel`` int8 codes."""
    q = qmax(bits)
    if bits == 8:
        return (data.to(torch.int32) - q - 1)[:numel].to(torch.int8)
    per = 8 // math.gcd(8, bits)
    nbytes = per * bits // 8
    g = data.to(torch.int64).view(-1, nbytes)
    word = torch.zeros(g.shape[0], dtype=torch.int64, device=data.device)
    for j in range(nbytes):
        word |= g[:, j] << (8 * j)
    mask = (1 << bits) - 1
    u = torch.stack([(word >> (bits * i)) & mask for i in range(per)], 1).reshape(-1)[:numel]
    return (u - q - 1).to(torch.int8)
