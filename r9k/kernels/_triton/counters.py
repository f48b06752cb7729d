"""Arrival counters for the kernels whose programs meet at the end (split-K reductions, the GDN core's
per-head norm): zeroed int32 words that the last program to arrive resets to zero after use.

One pool per (device, user): the users never share words, so two kernels that overlap under programmatic
dependent launch cannot see each other's counts. Allocated once and kept (grown, never shrunk); the first
call must happen outside CUDA-graph capture (every caller warms up first). Kernels of one user on one
stream use their pool one after another; calls on concurrent streams must not overlap.
"""
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
