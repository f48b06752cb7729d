"""The few names vLLM's kernel files import from vLLM itself, for :mod:`.vllm_peer`."""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

__all__ = ["triton", "tl", "current_platform", "direct_register_custom_op", "cdiv", "next_power_of_2",
           "num_compute_units", "input_guard", "rearrange", "VllmJitKernel", "TritonPointerInputVariant",
           "TritonWarmupTensor", "triton_scalar_specialization_rep"]


class _Platform:
    @staticmethod
    def is_arch_support_pdl() -> bool:
        if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
            return False
        return torch.cuda.get_device_capability()[0] >= 9


current_platform = _Platform()


def direct_register_custom_op(*args, **kwargs) -> None:
    """Not needed to call the kernels' Python wrappers."""


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def num_compute_units(index=None) -> int:
    if not torch.cuda.is_available():
        return 132
    return torch.cuda.get_device_properties(0 if index is None else index).multi_processor_count


def input_guard(fn):
    """As flash-linear-attention's: every tensor argument made contiguous."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return wrapper


def rearrange(*args, **kwargs):
    from einops import rearrange as r  # only vLLM's reference paths use it

    return r(*args, **kwargs)


class VllmJitKernel:
    """Base of vLLM's kernel launchers; only the launch (``__call__``) is used here."""

    def __class_getitem__(cls, _key):
        return cls


class TritonPointerInputVariant:
    @classmethod
    def from_alignment(cls, **_kw):
        return cls()


class TritonWarmupTensor:
    pass


def triton_scalar_specialization_rep(v):
    return v


