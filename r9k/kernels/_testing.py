"""Small helpers of the kernel gate tests (imported by tests only)."""
from __future__ import annotations

import torch


def randn(shape, gen, device, dtype=torch.bfloat16, scale=1.0):
    """Fresh normal values from ``gen`` (never zeros: zeros hide unwritten outputs)."""
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in fp64; NaN anywhere gives NaN (which fails every ``<`` gate)."""
    a64, b64 = a.double(), b.double()
    return float((a64 - b64).norm() / b64.norm().clamp_min(1e-300))


def assert_written(t: torch.Tensor, what: str = "output") -> None:
    """Fail if any element still holds the poison (NaN for floats): the kernel left it unwritten."""
    if t.dtype.is_floating_point:
        bad = torch.isnan(t.float())
    else:
        bad = t == torch.iinfo(t.dtype).min
    n = int(bad.sum())
    assert n == 0, f"{what}: {n} of {t.numel()} elements unwritten (still poisoned)"


def bf16_flips(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many bf16 values differ bitwise between two tensors of the same shape."""
    return int((a.contiguous().view(torch.int16) != b.contiguous().view(torch.int16)).sum())


def bf16_ulp(t: torch.Tensor) -> torch.Tensor:
    a = t.double().abs().clamp_min(2.0 ** -126)
    return torch.exp2(torch.floor(torch.log2(a)) - 7)


def bf16_within(got: torch.Tensor, exact: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
    """Which elements of ``got`` (bf16) are the bf16 rounding of some value within ``tol`` of ``exact``
    (fp64): rounding is monotone, so those are the values between the roundings of ``exact -+ tol``."""
    lo = (exact - tol).to(torch.bfloat16).double()
    hi = (exact + tol).to(torch.bfloat16).double()
    g = got.double()
    return (g >= lo) & (g <= hi)


def fp32_dot_error(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A bound on the fp32 accumulation error of ``x @ w.T`` (any summation order): K * 2^-24 * |x| @ |w|.T."""
    return x.shape[-1] * 2.0 ** -24 * (x.double().abs() @ w.double().abs().t())
