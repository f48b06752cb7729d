"""Arrival counters of the kernels whose programs meet at the end (split-K reductions, the GDN core's norm):
zeroed int32 words the last program to arrive resets after use. One pool per (device, user), so kernels that
overlap under PDL never share words; allocated once (grown, never shrunk), first outside CUDA-graph capture."""
from __future__ import annotations

import torch

_POOLS: dict = {}


def arrival_counters(device: torch.device, n: int, user: str = "splitk") -> torch.Tensor:
    """At least ``n`` zeroed int32 counters of ``user``'s pool on ``device``."""
    device = torch.device(device)
    key = (device.type, device.index, user)
    buf = _POOLS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        _POOLS[key] = buf
    return buf
