"""References of the hyper-connection combine + grouped norm (docs/semantics.md 3.2): the stock
composition with the kernel's rounding points, and the fp64 math with the one rounding the semantics fix
(``out`` to bf16 before the norm), the gate's independent reference."""
from __future__ import annotations

import torch


def hc_combine_norm(res, blk, inj, weight, eps: float = 1e-6, hc: int = 4):
    M = res.shape[0]
    if blk is not None:
        hd = blk.shape[1]
        g = 2.0 * torch.sigmoid(inj.float() / hc)
        res = (res.float().view(M, hc, hd) + blk.float()[:, None, :] * g[:, :, None]).to(torch.bfloat16)
        res = res.view(M, hc * hd)
    x = res.float().view(M, hc, -1)
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    w = weight.float().view(-1)
    w = w.view(1, hc, -1) if w.numel() != x.shape[2] else w.view(1, 1, -1)
    y = (x * r) * (1.0 + w)
    return res, y.reshape(M, -1).to(torch.bfloat16)


def hc_combine_norm_fp64(res, blk, inj, weight, eps: float = 1e-6, hc: int = 4):
    M = res.shape[0]
    x = res.double()
    if blk is not None:
        hd = blk.shape[1]
        g = 2.0 * torch.sigmoid(inj.double() / hc)
        x = (x.view(M, hc, hd) + blk.double()[:, None, :] * g[:, :, None]).view(M, hc * hd)
    out = x.to(torch.bfloat16)
    xs = out.double().view(M, hc, -1)
    r = torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps)
    w = weight.double().view(-1)
    w = w.view(1, hc, -1) if w.numel() != xs.shape[2] else w.view(1, 1, -1)
    return out, (xs * r * (1.0 + w)).reshape(M, -1)
