"""Programmatic dependent launch (SM90): a kernel launched with ``launch_pdl=True`` may start while its
predecessor runs; it calls :func:`gdc_wait` before touching the predecessor's output, and the predecessor calls
:func:`gdc_launch_dependents`. On with ``R9K_PDL=1`` (opt-in), CUDA devices of compute capability >= 9 only."""
from __future__ import annotations

import functools
import os

import triton
import triton.language as tl

from .common import INTERPRETED


@functools.lru_cache(maxsize=None)
def _device_ok(index: int) -> bool:
    import torch

    return torch.cuda.get_device_capability(index)[0] >= 9


def pdl_enabled(t) -> bool:
    """Whether kernels on tensor ``t``'s device launch with programmatic dependent launch."""
    if INTERPRETED or not getattr(t, "is_cuda", False) or os.environ.get("R9K_PDL", "0") != "1":
        return False
    return _device_ok(t.device.index if t.device.index is not None else 0)


@triton.jit
def gdc_wait():
    tl.extra.cuda.gdc_wait()


@triton.jit
def gdc_launch_dependents():
    tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_l2(ptrs):
    """``prefetch.global.L2`` of each address (a hint), before :func:`gdc_wait` on data no predecessor
    writes (weights). Pass only valid addresses (mask with ``tl.where(mask, ptrs, base)``)."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)
