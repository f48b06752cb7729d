"""Stock path and fp64 references of the hyper-connection input mix (docs/semantics.md 3.1, 3.3).

Stock (4 launches on a GPU, as vLLM runs it): ``buf = F.linear(xn, W_down)`` [M, 336]; ``hc_silu`` in place on
``buf[:, :320]``; ``gate = F.linear(buf[:, :320], W_up)`` [M, 10240]; ``hc_gate_mix(xn, gate)``. fp8 weights:
per output row ``s_n = max(amax_row, 1e-12) / 448``, ``q = e4m3(W / s_n)``; W8A16 ``bf16(s_n * sum_k q * x)``."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from .._out import into
from .elementwise import hc_gate_mix, hc_gate_mix_torch, hc_silu_, hc_silu_torch_

HC = 4
LORA = 320


# ---------------------------------------------------------------------------------- stock paths

def hc_mix(xn, w_down, w_up, out_buf=None, out_block=None, *, lora_rank: int = LORA, hc_count: int = HC):
    """Stock hyper-connection input mix (bf16 weights): ``(buf [M, 336] bf16, block_input [M, HD] bf16)``,
    ``buf[:, :lora_rank]`` the hc_silu'd lora, ``buf[:, lora_rank:lora_rank+hc]`` the raw injection logits."""
    buf = F.linear(xn, w_down)
    buf = into(out_buf, buf)
    hc_silu_(buf, lora_rank, hc_count)
    gate = F.linear(buf[:, :lora_rank], w_up)
    block = hc_gate_mix(xn, gate, hc_count, out=out_block)
    return buf, block


def prepare_hc_fp8(w_down: torch.Tensor, w_up: torch.Tensor):
    """The fp8 copies, once at load: ``(down_q, down_s, up_q, up_s)``, e4m3 [N, K] and fp32 [N]."""

    def q(w):
        wf = w.float()
        s = wf.abs().amax(dim=1).clamp_min(1e-12) / torch.full((w.shape[0],), 448.0, device=w.device)
        return (wf / s[:, None]).to(torch.float8_e4m3fn).contiguous(), s.contiguous()

    dq, ds = q(w_down)
    uq, us = q(w_up)
    return dq, ds, uq, us


def hc_fp8_bytes(down_q, down_s, up_q, up_s) -> int:
    """Device bytes the fp8 copies of one HC module take (codes + per-row scales)."""
    return sum(t.numel() * t.element_size() for t in (down_q, down_s, up_q, up_s))


def _w8a16(x, q, s):
    return ((x.float() @ q.float().t()) * s[None, :]).to(torch.bfloat16)


def hc_mix_fp8(xn, down_q, down_s, up_q, up_s, out_buf=None, out_block=None, *,
               lora_rank: int = LORA, hc_count: int = HC):
    """Plain-PyTorch W8A16 mix on the fp8 copies: the semantics reference and the fallback."""
    buf = _w8a16(xn, down_q, down_s)
    hc_silu_torch_(buf, lora_rank, hc_count)
    gate = _w8a16(buf[:, :lora_rank], up_q, up_s)
    return into(out_buf, buf), into(out_block, hc_gate_mix_torch(xn, gate, hc_count))


# ------------------------------------------------------------------------------ fp64 references

def mix_fp64(xn, lora, w_up, up_scale=None, hc_count: int = HC):
    """fp64 reference of stock's up + gated mean from a given bf16 ``lora`` (the up GEMM rounded to bf16)."""
    g = lora.double() @ w_up.double().t()
    if up_scale is not None:
        g = g * up_scale.double()[None, :]
    g = g.to(torch.bfloat16).double()
    M = xn.shape[0]
    hd = xn.shape[1] // hc_count
    t = torch.sigmoid(g.view(M, hc_count, hd)) * xn.double().reshape(M, hc_count, hd)
    return t.sum(dim=1) / hc_count


def hc_fp8_dequant_ref(xn, down_q, down_s, up_q, up_s, lora_rank: int = LORA, hc_count: int = HC):
    """The fp8 gate's reference (3.3): fp32 GEMMs on the dequantised weights, rounded to bf16."""
    wd = down_q.float() * down_s[:, None]
    wu = up_q.float() * up_s[:, None]
    buf = (xn.float() @ wd.t()).to(torch.bfloat16)
    hc_silu_torch_(buf, lora_rank, hc_count)
    gate = (buf[:, :lora_rank].float() @ wu.t()).to(torch.bfloat16)
    return buf, hc_gate_mix_torch(xn, gate, hc_count)
