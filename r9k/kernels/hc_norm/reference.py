"""References of the hyper-connection combine + grouped norm (docs/semantics.md 3.2): the stock
composition with the kernel's rounding points, and the fp64 math with the one rounding the semantics fix
(``out`` to bf16 before the norm), the gate's independent reference."""
from __future__ import annotations

import torch


def _combine_norm(res, blk, inj, weight, eps, hc, dtype):
    """``(out bf16, y unrounded)`` with the arithmetic in ``dtype``."""
    M = res.shape[0]
    if blk is not None:
        hd = blk.shape[1]
        g = 2.0 * torch.sigmoid(inj.to(dtype) / hc)
        res = (res.to(dtype).view(M, hc, hd) + blk.to(dtype)[:, None, :] * g[:, :, None]).to(torch.bfloat16)
        res = res.view(M, hc * hd)
    x = res.to(dtype).view(M, hc, -1)
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    w = weight.to(dtype).view(-1)
    w = w.view(1, hc, -1) if w.numel() != x.shape[2] else w.view(1, 1, -1)
    return res, ((x * r) * (1.0 + w)).reshape(M, -1)


def hc_combine_norm(res, blk, inj, weight, eps: float = 1e-6, hc: int = 4):
    out, y = _combine_norm(res, blk, inj, weight, eps, hc, torch.float32)
    return out, y.to(torch.bfloat16)


def hc_combine_norm_fp64(res, blk, inj, weight, eps: float = 1e-6, hc: int = 4):
    return _combine_norm(res, blk, inj, weight, eps, hc, torch.float64)
