"""The all-reduce variants' schedules over a ``torch.distributed`` group (docs/semantics.md 3.12).

Called by every rank with a tensor of the same shape and dtype, each returns the sum over ranks, bitwise
identical on every rank. Where the GPU variants read peers' buffers, these move the same data with
``all_gather``: the additions and their order are the GPU kernels', only the transport differs.

* :func:`one_shot`: every rank adds every peer's whole message in rank order.
* :func:`two_shot`: rank ``r`` adds chunk ``r`` of every rank in rank order, then all gather the chunks
  (bitwise equal to :func:`one_shot` and :func:`fixed_order_sum`).
* :func:`compressed_one_shot`: every rank sends its message quantized (:mod:`.quant`), all add the dequantized
  messages in rank order.
* :func:`compressed_two_shot`: reduce-scatter with quantized peers' chunks (the owner's own exact), then an
  all-gather of the owner's quantized sum.
* :func:`hier4`: 4 ranks as pairs (0, 1) and (2, 3): exact inside a pair, quantized between the pairs.

``codec`` is :class:`TorchCodec` or the Triton one (:mod:`.triton_kernel`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import quant


class TorchCodec:
    """The plain-PyTorch codec (:mod:`.quant`)."""

    name = "stock"

    @staticmethod
    def quantize(x, bits, block):
        return quant.quantize(x, bits, block)

    @staticmethod
    def dequant_sum(codes_list, scales_list):
        acc = quant.dequantize(codes_list[0], scales_list[0]).clone()
        for c, s in zip(codes_list[1:], scales_list[1:]):
            acc += quant.dequantize(c, s)
        return acc


def _gather(t: torch.Tensor, group) -> list[torch.Tensor]:
    t = t.contiguous()
    bufs = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(bufs, t, group=group)
    return bufs


def fixed_order_sum(parts, dtype) -> torch.Tensor:
    """``parts[0] + parts[1] + ...`` in fp32, left to right, rounded once to ``dtype``."""
    acc = parts[0].float().clone()
    for p in parts[1:]:
        acc += p.float()
    return acc.to(dtype)


def one_shot(x: torch.Tensor, group=None) -> torch.Tensor:
    return fixed_order_sum(_gather(x, group), x.dtype)


def _chunks(n: int, world: int, align: int = 1) -> int:
    """Elements per owner's chunk: ``ceil(n / world)`` rounded up to ``align``."""
    c = max(1, math.ceil(n / world))
    return math.ceil(c / align) * align


def two_shot(x: torch.Tensor, group=None) -> torch.Tensor:
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    flat = x.reshape(-1)
    n = flat.numel()
    c = _chunks(n, world)
    padded = torch.cat([flat, flat.new_zeros(c * world - n)]) if c * world != n else flat
    peers = _gather(padded, group)  # the owner reads chunk `rank` of each peer
    mine = fixed_order_sum([p[rank * c:(rank + 1) * c] for p in peers], x.dtype)
    return torch.cat(_gather(mine, group))[:n].view_as(x)


def _exchange(codes, scales, bits, group):
    """Every rank's packed codes and scales, unpacked: what the wire carries, and nothing more."""
    wires = _gather(quant.pack(codes, bits), group)
    scs = _gather(scales, group)
    return [quant.unpack(w, bits, codes.numel()).view_as(codes) for w in wires], scs


def compressed_one_shot(x, group=None, bits=4, block=quant.DEFAULT_BLOCK, codec=TorchCodec) -> torch.Tensor:
    codes, scales = codec.quantize(x, bits, block)
    all_codes, all_scales = _exchange(codes, scales, bits, group)
    out = codec.dequant_sum(all_codes, all_scales)
    return out.reshape(-1)[: x.numel()].to(x.dtype).view_as(x)


def compressed_two_shot(x, group=None, bits=4, block=quant.DEFAULT_BLOCK, codec=TorchCodec) -> torch.Tensor:
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    flat = x.reshape(-1).float()
    n = flat.numel()
    c = _chunks(n, world, block)  # chunks hold whole blocks
    padded = torch.cat([flat, flat.new_zeros(c * world - n)]) if c * world != n else flat
    codes, scales = codec.quantize(padded, bits, block)
    all_codes, all_scales = _exchange(codes, scales, bits, group)
    bpc = c // block  # blocks per chunk
    lo, hi = rank * bpc, (rank + 1) * bpc
    partial = torch.zeros(bpc, block, dtype=torch.float32, device=x.device)
    for r in range(world):  # rank order; the owner's own chunk exact, peers' dequantized
        if r == rank:
            partial += padded[rank * c:(rank + 1) * c].view(bpc, block)
        else:
            partial += codec.dequant_sum([all_codes[r][lo:hi]], [all_scales[r][lo:hi]])
    c2, s2 = codec.quantize(partial, bits, block)
    owners_codes, owners_scales = _exchange(c2, s2, bits, group)
    parts = [codec.dequant_sum([oc], [os_]) for oc, os_ in zip(owners_codes, owners_scales)]
    return torch.cat(parts).reshape(-1)[:n].to(x.dtype).view_as(x)


def hier4(x, group=None, bits=4, block=quant.DEFAULT_BLOCK, codec=TorchCodec) -> torch.Tensor:
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world != 4:
        raise ValueError(f"hier4 is the 2x2 schedule of 4 ranks, not {world}")
    flat = x.reshape(-1).float()
    n = flat.numel()
    c = _chunks(n, 2, block)  # two halves of whole blocks
    padded = torch.cat([flat, flat.new_zeros(2 * c - n)]) if 2 * c != n else flat
    pair, half = divmod(rank, 2)
    # A: exact reduce-scatter inside the pair: this rank owns half `half` of its pair's sum
    peers = _gather(padded, group)
    partner_lo = 2 * pair
    p_sum = peers[partner_lo][half * c:(half + 1) * c].clone()
    p_sum += peers[partner_lo + 1][half * c:(half + 1) * c]
    # B: the pair-to-pair hop, quantized: ranks `half` and `2 + half` hold the same half of the two pairs
    codes, scales = codec.quantize(p_sum, bits, block)
    all_codes, all_scales = _exchange(codes, scales, bits, group)
    same = [half, 2 + half]  # pair order
    mine = codec.dequant_sum([all_codes[r] for r in same], [all_scales[r] for r in same]).reshape(-1)
    # C: exact all-gather inside the pair
    halves = _gather(mine, group)
    full = torch.cat([halves[partner_lo], halves[partner_lo + 1]])
    return full[:n].to(x.dtype).view_as(x)


@dataclass(frozen=True)
class Config:
    """The registry's all-reduce knobs, as the plugin resolves them (fields named after the variant ids:
    ``ar_scratch_mb`` -> two_rank_max_mb, ``arn_oneshot_cap`` / ``arn_max_kb`` -> oneshot_kb / max_kb)."""

    enabled: bool = False
    two_rank_max_mb: int = 48
    ar2_compressed: bool = False
    ar2_bits: int = 4
    ar2_min_kb: int = 128
    oneshot_kb: int = 16
    max_kb: int = 512
    ar4_compressed: bool = False
    ar4_bits: int = 4
    ar4_max_mb: int = 64
    block: int = quant.DEFAULT_BLOCK

    def choose(self, nbytes: int, world: int) -> str:
        """The schedule of a message of ``nbytes`` at ``world`` ranks; decode-sized messages stay exact."""
        if not self.enabled or world < 2:
            return "stock"
        if world == 2:
            if self.ar2_compressed and nbytes >= self.ar2_min_kb * 1024:
                return "compressed_one_shot"
            return "one_shot" if nbytes <= self.two_rank_max_mb * 1024 * 1024 else "stock"
        if nbytes <= self.oneshot_kb * 1024:
            return "one_shot"
        if nbytes <= self.max_kb * 1024:
            return "two_shot"
        if world == 4 and self.ar4_compressed and nbytes <= self.ar4_max_mb * 1024 * 1024:
            return "hier4"
        return "stock"


def all_reduce(x: torch.Tensor, cfg: Config, group=None, codec=TorchCodec, stock=None) -> tuple[str, torch.Tensor]:
    """``(schedule, sum)`` for ``x`` under ``cfg``; ``stock(x, group)`` runs the library's all-reduce."""
    world = dist.get_world_size(group)
    kind = cfg.choose(x.numel() * x.element_size(), world)
    if kind == "stock":
        if stock is None:
            from .reference import all_reduce_stock as stock
        return kind, stock(x, group)
    if kind == "one_shot":
        return kind, one_shot(x, group)
    if kind == "two_shot":
        return kind, two_shot(x, group)
    if kind == "compressed_one_shot":
        return kind, compressed_one_shot(x, group, cfg.ar2_bits, cfg.block, codec)
    return kind, hier4(x, group, cfg.ar4_bits, cfg.block, codec)


def variant_all_reduce(x: torch.Tensor, group=None, cfg: "Config | None" = None, codec=TorchCodec) -> torch.Tensor:
    """The op table's fused implementation: the sum by the schedule ``cfg`` picks (None: every
    schedule on, at :class:`Config`'s thresholds)."""
    return all_reduce(x, cfg if cfg is not None else Config(enabled=True), group, codec)[1]
