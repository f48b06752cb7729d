"""Shared expert of a Flash-Next MoE layer (docs/semantics.md 3.6, appendices A and B). Stock = the plugin's
unfused composition, 8 launches:

1. per-row fp8 quant of x;  2. ``gu = bf16(GEMM_mxfp4(x_q, W1) * s_x)`` [M, 2I] (gate | up);
3. ``act = bf16(silu(gate) * up)``;  4. per-row fp8 quant of act;  5. ``dn = bf16(GEMM_mxfp4(act_q, W2) * s_act)``;
6. ``gl = F.linear(x, wg)`` (bf16 [M, 1]);  7. ``g = sigmoid(gl)`` (bf16);  8. ``out = dn * g`` (bf16).

On a GPU steps 1-5 run the kernels of ``blocks.py``; elsewhere the torch emulations below (the same values: the
quant and silu-and-mul bit for bit, the GEMM up to summation order). MXFP4 weight [N, K]: ``packed`` uint8
[N, K/2] (element 2i in the low nibble) and ``scales`` uint8 [N, K/32] (E8M0: values ``e2m1 * 2^(E-127)``)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP8_MAX = 448.0


@dataclass(frozen=True)
class SharedExpertWeights:
    """One shared expert as the kernels read it: gate_up ``w1_*`` [2I, H/2] and [2I, H/32] (rows
    0..I-1 gate), down ``w2_*`` [H, I/2] and [H, I/32], the expert gate ``wg`` [H] bf16."""

    w1_packed: torch.Tensor
    w1_scales: torch.Tensor
    w2_packed: torch.Tensor
    w2_scales: torch.Tensor
    wg: torch.Tensor

    @property
    def intermediate(self) -> int:
        return self.w1_packed.shape[0] // 2

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.w1_packed, self.w1_scales, self.w2_packed,
                                                           self.w2_scales, self.wg))


def prepare_shared_expert(w1_packed, w1_scales, w2_packed, w2_scales, wg) -> SharedExpertWeights:
    """Check shapes and make the tensors contiguous (the checkpoint's codes as they are)."""
    two_i, half_h = w1_packed.shape
    H, half_i = w2_packed.shape
    if two_i != 4 * half_i or H != 2 * half_h or w1_scales.shape != (two_i, H // 32) \
            or w2_scales.shape != (H, two_i // 2 // 32) or wg.reshape(-1).shape != (H,):
        raise ValueError("inconsistent shared-expert MXFP4 shapes")
    return SharedExpertWeights(w1_packed.contiguous(), w1_scales.contiguous(), w2_packed.contiguous(),
                               w2_scales.contiguous(), wg.reshape(-1).contiguous())


# ---------------------------------------------------------------------------------------------- MXFP4 helpers
def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A [N, K] float weight in MXFP4 (OCP MX rule: E = floor(log2(amax)) - 2 per 32 values, e2m1
    codes rounded to nearest, clamped at 6), for tests and bf16 models."""
    N, K = w.shape
    blocks = w.float().reshape(N, K // 32, 32)
    amax = blocks.abs().amax(-1).clamp_min(2.0**-126)
    e = torch.floor(torch.log2(amax)) - 2
    e = e.clamp(-126, 127)
    scaled = blocks / torch.exp2(e)[..., None]
    grid = torch.tensor(E2M1_VALUES, device=w.device)
    mag = scaled.abs().clamp(max=6.0)
    code = (mag[..., None] - grid).abs().argmin(-1)  # nearest grid value (ties to the lower code)
    code = code | ((scaled < 0).long() << 3)
    code = code.reshape(N, K).to(torch.uint8)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed.contiguous(), (e + 127).to(torch.uint8).contiguous()


def dequant_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """[N, K] fp32 values of an MXFP4 weight (exact)."""
    N = packed.shape[0]
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(N, -1).long()
    grid = torch.tensor(E2M1_VALUES, device=packed.device, dtype=torch.float32)
    vals = grid[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    scale = torch.exp2(scales.float() - 127.0).repeat_interleave(32, dim=1)
    return vals * scale


# ---------------------------------------------------------------------------------------------- torch emulations
def row_quant_fp8_torch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Appendix B on an fp32 or bf16 [M, K]: (q e4m3 [M, K], s fp32 [M])."""
    xf = x.float()
    A = xf.abs().amax(-1).clamp_min(1e-12)
    # true fp32 divisions, tensor by tensor: torch evaluates ``scalar / tensor`` as ``scalar * reciprocal(tensor)``,
    # and on CUDA ``tensor / python scalar`` as ``tensor * (1 / scalar)`` (two roundings each)
    full = torch.full_like(A, FP8_MAX)
    inv = full / A
    q = (xf * inv[:, None]).to(torch.float8_e4m3fn)
    return q, A / full


def mxfp4_gemm_torch(q: torch.Tensor, s: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                     gate: torch.Tensor | None = None) -> torch.Tensor:
    """``bf16(acc * s[m] [* gate[m]])`` with ``acc = sum_k q[m,k] * W[n,k]`` in fp32 (exact products)."""
    acc = q.float() @ dequant_mxfp4(packed, scales).t()
    acc = acc * s[:, None]
    if gate is not None:
        acc = acc * gate[:, None]
    return acc.to(torch.bfloat16)


def silu_and_mul_torch(gu: torch.Tensor) -> torch.Tensor:
    I = gu.shape[1] // 2
    g, u = gu[:, :I].float(), gu[:, I:].float()
    return (g / (1.0 + torch.exp(-g)) * u).to(torch.bfloat16)


# ---------------------------------------------------------------------------------------------- stock path
def _use_triton(x: torch.Tensor) -> bool:
    return x.is_cuda


def shared_expert(x: torch.Tensor, weights: SharedExpertWeights, out: torch.Tensor | None = None) -> torch.Tensor:
    """Stock shared expert, 8 launches (see the module doc); x [M, H] bf16 (last dim contiguous)."""
    w = weights
    if _use_triton(x):
        from . import blocks as tk
        quant, gemm, silu_mul = tk.row_quant, tk.mxfp4_gemm, tk.silu_and_mul
    else:
        quant, gemm, silu_mul = row_quant_fp8_torch, mxfp4_gemm_torch, silu_and_mul_torch
    xq, xs = quant(x)                                               # 1
    gu = gemm(xq, xs, w.w1_packed, w.w1_scales)                     # 2
    act = silu_mul(gu)                                              # 3
    aq, as_ = quant(act)                                            # 4
    dn = gemm(aq, as_, w.w2_packed, w.w2_scales)                    # 5
    gl = F.linear(x, w.wg.view(1, -1))                              # 6
    g = torch.sigmoid(gl)                                           # 7
    if out is not None:
        return torch.mul(dn, g, out=out)                           # 8
    return dn * g


def shared_expert_fp64(x: torch.Tensor, weights: SharedExpertWeights) -> torch.Tensor:
    """The gate's reference: stock's semantics from the same fp8 quant of x, the activation
    unquantized and nothing rounded, in fp64."""
    w = weights
    xq, xs = row_quant_fp8_torch(x)
    xd = xq.double() * xs.double()[:, None]
    gu = xd @ dequant_mxfp4(w.w1_packed, w.w1_scales).double().t()
    I = w.intermediate
    act = gu[:, :I] * torch.sigmoid(gu[:, :I]) * gu[:, I:]
    dn = act @ dequant_mxfp4(w.w2_packed, w.w2_scales).double().t()
    return dn * torch.sigmoid(x.double() @ w.wg.double())[:, None]
