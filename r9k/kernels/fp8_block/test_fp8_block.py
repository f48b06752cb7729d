"""Gate tests for the block-fp8 linear with fused activation quant (docs/semantics.md 3.11).

Gate: the fused one-launch path and the stock two-launch path (quant kernel + GEMM) see the same fp8
operands (the quant is checked bit-exact against a PyTorch reference) and agree to a relative L2
difference < 1e-5; both are also checked against an fp64 reference of the same semantics.
CPU: Triton interpreter at small shapes with tails; GPU (``-m gpu``): the Flash-Next TP4/TP2 shards.
"""
from __future__ import annotations

import pytest
import torch

from .._testing import assert_written, rel_l2

from . import reference as ref
from . import triton_kernel as tk

# Flash-Next dense block-fp8 shards (N, K): TP4 GDN out_proj / o_proj, qkv, GDN in_proj; TP2 o_proj,
# qkv, GDN in_proj.
REAL_SHAPES = [(2560, 1536), (3584, 2560), (4096, 2560), (2560, 3072), (6656, 2560), (8192, 2560)]


def _need_triton(device):
    if not (device == "cuda" or tk.INTERPRETED):
        pytest.skip("no Triton platform: no CUDA device and TRITON_INTERPRET was not set at import")


def _operands(M, N, K, gen, device):
    """Activations with rows at very different scales (one row tiny), e4m3 weights spanning the
    code range, block scales in [0.005, 0.01] as in the original gate."""
    row_scale = torch.exp(torch.randn((M, 1), generator=gen, device=device) * 2.0)
    x = (torch.randn((M, K), generator=gen, device=device) * row_scale)
    if M > 2:
        x[1] *= 1e-5
    x = x.to(torch.bfloat16)
    w_q = (torch.randn((N, K), generator=gen, device=device) * 80.0).clamp(-448, 448).to(torch.float8_e4m3fn)
    w_s = torch.rand(((N + 127) // 128, K // 128), generator=gen, device=device) * 0.005 + 0.005
    return x, w_q, w_s


def _check_quant(x, poison):
    M, K = x.shape
    q = poison(torch.empty((M, K), dtype=torch.float8_e4m3fn, device=x.device))
    s = poison(torch.empty((M, K // 128), dtype=torch.float32, device=x.device))
    q, s = tk.quant_group128_fp8(x, out_q=q, out_s=s)
    qr, sr = ref.quant_group128_fp8(x)
    assert torch.equal(q.view(torch.uint8), qr.view(torch.uint8)), "fp8 codes differ from the reference"
    assert torch.equal(s, sr), "group scales differ from the reference"


def _check_linear(x, w_q, w_s, poison, config=None):
    M, N = x.shape[0], w_q.shape[0]
    outs = []
    for fn in (tk.fp8_block_linear, tk.fp8_block_linear_stock):
        out = poison(torch.empty((M, N), dtype=torch.bfloat16, device=x.device))
        y = fn(x, w_q, w_s, out=out, config=config)
        assert y.data_ptr() == out.data_ptr()
        assert_written(y, fn.__name__)
        outs.append(y)
    fused, stock = outs
    d = rel_l2(fused, stock)
    assert d < 1e-5, f"fused vs two-launch relative difference {d}"
    r64 = ref.fp8_block_linear_fp64(x, w_q, w_s)
    e = rel_l2(fused, r64)
    assert e < 1e-2, f"relative error vs fp64 {e}"
    return fused


def test_quant_bit_exact_interpreter(device, rng, poison):
    _need_triton(device)
    x, _, _ = _operands(7, 128, 640, rng, device)
    x[2, :128] = 0.0  # an all-zero group: A = 1e-12, codes 0
    x[3, 128:256] = torch.tensor(448.0 * 3).to(torch.bfloat16)  # constant group
    _check_quant(x, poison)


@pytest.mark.parametrize("M", [1, 3, 8, 16])
@pytest.mark.parametrize("N,K,config", [(160, 384, None), (160, 384, (32, 2, 4, 3)), (256, 256, (64, 1, 4, 2, 1)), (160, 640, (16, 2, 2, 3, 1)),
                                        (96, 512, (32, 4, 4, 3))])
def test_fused_vs_two_launch_interpreter(M, N, K, config, device, rng, poison):
    _need_triton(device)
    x, w_q, w_s = _operands(M, N, K, rng, device)
    _check_linear(x, w_q, w_s, poison, config)


def test_strided_rows_and_wide_m_interpreter(device, rng, poison):
    _need_triton(device)
    xb, w_q, w_s = _operands(20, 160, 512, rng, device)
    x = xb[:, :384]  # row stride 512, K 384
    w_q, w_s = w_q[:, :384].contiguous(), w_s[:, :3].contiguous()
    _check_linear(x[:5], w_q, w_s, poison)
    _check_linear(x, w_q, w_s, poison)  # M = 20 > 16: both wrappers run the two-launch path


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 3, 8, 16])
@pytest.mark.parametrize("N,K", REAL_SHAPES)
def test_fused_vs_two_launch_gpu(M, N, K, rng, poison):
    x, w_q, w_s = _operands(M, N, K, rng, "cuda")
    _check_quant(x, poison)
    y = _check_linear(x, w_q, w_s, poison)
    assert torch.equal(y, tk.fp8_block_linear(x, w_q, w_s)), "a second launch gave other bits"
