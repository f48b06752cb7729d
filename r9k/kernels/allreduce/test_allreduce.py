"""Gate of the all-reduce variants (registry area ``comm``; docs/semantics.md 3.12), CPU part.

Multi-process tests run real ``torch.distributed`` gloo groups of 2 and 4 processes: the exact schedules
must equal the fixed-order fp32 sum bitwise on every rank (and stay within the fp32 accumulation bound of
the fp64 sum) over many iterations with fresh data; the compressed schedules must agree bitwise across
ranks and stay within their stated per-block bound. The codec is checked alone too, plain PyTorch against
its Triton kernels (interpreter here, the GPU on a CUDA machine).
"""
from __future__ import annotations

import json
import math
import socket

import pytest

E2E_MINUTES = 1  # its gloo groups: 42 + 24 + 12 s under load 5-10 on 2026-12-01: tests/conftest.py runs it early (no server; slow)

torch = pytest.importorskip("torch")

from . import algorithms, quant, reference  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_group(world, seed, tmp_path, codec, iters):
    import torch.multiprocessing as mp

    from . import _worker

    mp.spawn(_worker.spawn_entry, args=(world, _free_port(), seed, str(tmp_path), codec, iters),
             nprocs=world, join=True)
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    for r in res:
        assert not r["failures"], f"rank {r['rank']}: " + "\n".join(r["failures"][:5])
        assert r["checks"] > 0
    return res


@pytest.mark.parametrize("world", [2, 4])
def test_schedules_in_a_gloo_group(world, seed, tmp_path):
    res = _run_group(world, seed, tmp_path, "stock", iters=10)
    print(json.dumps(res[0]["rms"], indent=1), res[0]["kinds"])
    kinds = res[0]["kinds"]
    assert kinds["64"] == "one_shot"
    assert kinds["1024"] == ("two_shot" if world == 4 else "one_shot")
    assert kinds["8192"] == ("hier4" if world == 4 else "compressed_one_shot")


def test_sizes_pick_the_declared_schedule():
    """The size rule at each threshold's edge (bytes), per rank count: what the registry's knobs decide."""
    kb, mb = 1024, 1024 * 1024
    cfg = algorithms.Config(enabled=True, two_rank_max_mb=48, ar2_compressed=True, ar2_bits=4, ar2_min_kb=128,
                            oneshot_kb=16, max_kb=512, ar4_compressed=True, ar4_max_mb=64)
    two = {1: "one_shot", 128 * kb - 2: "one_shot", 128 * kb: "compressed_one_shot", 64 * mb: "compressed_one_shot"}
    four = {1: "one_shot", 16 * kb: "one_shot", 16 * kb + 2: "two_shot", 512 * kb: "two_shot",
            512 * kb + 2: "hier4", 64 * mb: "hier4", 64 * mb + 2: "stock"}
    for world, want in ((2, two), (4, four)):
        got = {n: cfg.choose(n, world) for n in want}
        assert got == want, (world, got)
    assert {n: cfg.choose(n, 3) for n in four} == {**four, 512 * kb + 2: "stock", 64 * mb: "stock"}  # hier4: 4 ranks
    exact2 = algorithms.Config(enabled=True, two_rank_max_mb=48)  # the compressed wire off: exact up to the cap
    assert [exact2.choose(n, 2) for n in (48 * mb, 48 * mb + 2)] == ["one_shot", "stock"]
    assert algorithms.Config(enabled=False).choose(64, 2) == "stock" and cfg.choose(64, 1) == "stock"


def test_fused_codec_in_a_gloo_group(seed, tmp_path):
    pytest.importorskip("triton")
    _run_group(2, seed, tmp_path, "fused", iters=2)


@pytest.mark.parametrize("bits", [4, 6, 8])
def test_pack_roundtrip(bits, seed):
    g = torch.Generator().manual_seed(seed)
    q = quant.qmax(bits)
    for n in (1, 2, 3, 5, 128, 1001):
        codes = torch.randint(-q, q + 1, (n,), generator=g, dtype=torch.int32).to(torch.int8)
        packed = quant.pack(codes, bits)
        assert packed.numel() == math.ceil(n * bits / 8 / (3 if bits == 6 else 1)) * (3 if bits == 6 else 1) \
            or bits != 6
        assert torch.equal(quant.unpack(packed, bits, n), codes)


@pytest.mark.parametrize("bits", [4, 6])
def test_codec_rounding_rule(bits, seed):
    """Every rotated element moves by at most half a scale; a block of zeros stays zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3000, generator=g)
    x[:128] = 0
    codes, scales = quant.quantize(x, bits)
    y = quant.rotate(quant.to_blocks(x, 128))
    err = (y - codes.float() * scales[:, None]).abs()
    assert bool((err <= scales[:, None] / 2 * (1 + 1e-6) + 1e-12).all())
    assert scales[0] == 0 and not codes[0].any()
    assert int(codes.abs().max()) == quant.qmax(bits)


def test_bound_catches_a_broken_codec(seed):
    """The stated bound is not vacuous: a dequantizer that forgets the inverse rotation fails it."""
    xs = [torch.randn(4096, generator=torch.Generator().manual_seed(seed + r)) for r in range(2)]
    good = quant.dequantize(*quant.quantize(xs[0], 4)) + quant.dequantize(*quant.quantize(xs[1], 4))
    bad = sum(c.float() * s[:, None] for c, s in (quant.quantize(x, 4) for x in xs))
    bound = reference.error_bound(xs, "compressed_one_shot", 4)
    assert bool((reference.block_errors(good.reshape(-1), xs) <= bound).all())
    assert bool((reference.block_errors(bad.reshape(-1), xs) > bound).any())


@pytest.mark.parametrize("block", [128, 64])
def test_triton_codec_matches_the_reference(block, seed, device):
    pytest.importorskip("triton")
    from . import triton_kernel

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(37 * block + 5, generator=g, device=device) * 3
    for bits in (4, 6):
        c_ref, s_ref = quant.quantize(x, bits, block)
        c, s = triton_kernel.quantize(x, bits, block)
        assert torch.allclose(s, s_ref, rtol=1e-6, atol=0)
        diff = (c.int() - c_ref.int()).abs()
        assert int(diff.max()) <= 1, "a code differs by more than a rounding-boundary step"
        assert int((diff > 0).sum()) <= max(2, c.numel() // 1000)
        out = triton_kernel.dequant_sum([c, c_ref], [s, s_ref])
        ref = quant.dequantize(c, s) + quant.dequantize(c_ref, s_ref)
        assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


@pytest.mark.gpu
@pytest.mark.parametrize("kb", [8, 64, 512, 2048])
def test_triton_codec_gpu_decode_sizes(kb, seed):
    """The codec on the GPU at decode-to-prefill message sizes (bf16 hidden states)."""
    from . import triton_kernel

    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(kb * 512, generator=g, device="cuda").to(torch.bfloat16)
    for bits in (4, 6):
        c, s = triton_kernel.quantize(x, bits)
        c_ref, s_ref = quant.quantize(x, bits)
        assert int((c.int() - c_ref.int()).abs().max()) <= 1
        out = triton_kernel.dequant_sum([c], [s]).reshape(-1)[: x.numel()]
        bound = reference.error_bound([x], "compressed_one_shot", bits)
        errs = reference.block_errors(out.cpu(), [x.cpu()])
        assert bool((errs <= bound.to(errs)).all())
