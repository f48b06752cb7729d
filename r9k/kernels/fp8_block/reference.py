"""Plain-PyTorch block-fp8 linear with per-(row, 128-group) activation quant (docs/semantics.md 3.11), and its
fp64 reference: the same math as the Triton paths (``triton_kernel.fp8_block_linear_stock`` is the GPU stock),
used without Triton and by the gates."""
from __future__ import annotations

import torch
from .._out import into

GROUP = 128
FP8_MAX = 448.0


def quant_group128_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] bf16 -> (qa [M, K] float8_e4m3fn, sa [M, K // 128] fp32), bit-exact with the
    Triton quant kernel and the fused A-load."""
    M, K = x.shape
    xf = x.float().view(M, K // GROUP, GROUP)
    A = xf.abs().amax(dim=-1).clamp_min(1e-12)
    c = torch.full_like(A, FP8_MAX)
    # Tensor / tensor on purpose: torch turns ``scalar / t`` into ``reciprocal(t) * scalar`` and, on
    # CUDA, ``t / scalar`` into ``t * (1 / scalar)``; both can differ from the IEEE quotient by an ulp.
    sa = A / c
    qa = (xf * (c / A)[..., None]).to(torch.float8_e4m3fn).view(M, K)
    return qa, sa


def _block_gemm(qa, sa, w_q, w_s, dtype) -> torch.Tensor:
    """The block-scaled GEMM of the quantised operands in ``dtype``, unrounded [M, N]."""
    M, K = qa.shape
    N = w_q.shape[0]
    G = K // GROUP
    part = torch.einsum("mgk,ngk->mng", qa.to(dtype).view(M, G, GROUP), w_q.to(dtype).view(N, G, GROUP))
    bs = w_s.to(dtype).repeat_interleave(GROUP, dim=0)[:N]  # [N, G]
    return ((part * bs[None]) * sa.to(dtype)[:, None, :]).sum(dim=-1)


def fp8_block_linear(x, w_q, w_s, out=None) -> torch.Tensor:
    return into(out, _block_gemm(*quant_group128_fp8(x), w_q, w_s, torch.float32).to(torch.bfloat16))


def fp8_block_linear_fp64(x, w_q, w_s) -> torch.Tensor:
    """fp64 reference: the exact quantised operands, products and sums in fp64, no rounding."""
    return _block_gemm(*quant_group128_fp8(x), w_q, w_s, torch.float64)
