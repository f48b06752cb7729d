"""Benchmark: block-fp8 linear, fused quant (1 launch) vs stock quant + GEMM (2 launches), on a GPU.

    python -m r9k.bench.kernels fp8_block [--sweep] [--json FILE]

M = 1, 4, 8, 16 on the Flash-Next shards, beside cuBLAS bf16, cuBLASLt fp8 row-wise (M = 16) and the fused kernel
with L2-hot weights. ``--sweep`` times tile configs on the TP4 in_proj (K = 2560) and out_proj (K = 1536) shards,
checks each against the fp64 reference and writes the winners for every shard of that K into tuned_<device>.json.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import timing as _bench
from ...kernels.fp8_block import reference as ref
from ...kernels.fp8_block import triton_kernel as tk

SHAPES = {
    "gdn_in_proj tp4": (4096, 2560),
    "gdn_out_proj/o_proj tp4": (2560, 1536),
    "attn_qkv tp4": (3584, 2560),
    "gdn_in_proj tp2": (8192, 2560),
}
ALL_SHARDS = [(2560, 1536), (3584, 2560), (4096, 2560), (2560, 3072), (6656, 2560), (8192, 2560)]
MS = (1, 4, 8, 16)
# (BLOCK_N, SPLIT_K, warps, stages, unroll)
SWEEP = (
    [(bn, sp, 4, 3, 0) for bn, sp in ((16, 1), (16, 2), (16, 4), (32, 2), (32, 4), (32, 8), (64, 2), (64, 4), (64, 8))]
    + [(bn, sp, 2, 3, 0) for bn, sp in ((16, 2), (32, 4), (64, 4))]
    + [(bn, sp, 4, 2, 1) for bn, sp in ((16, 2), (32, 4), (32, 8), (64, 4), (64, 8))]
    + [(bn, sp, 2, 2, 1) for bn, sp in ((16, 4), (32, 4))]
    + [(16, 2, 1, 3, 0), (16, 4, 1, 2, 1), (32, 4, 1, 3, 0)]
    # finer splits with every load of a split issued up front, and wider tiles with more warps
    + [(bn, sp, 4, 2, 1) for bn, sp in ((16, 5), (32, 5), (64, 5), (16, 10), (32, 10), (64, 10), (32, 20))]
    + [(128, 8, 4, 3, 0), (128, 16, 8, 3, 0), (64, 16, 4, 3, 0), (64, 8, 8, 3, 0), (32, 16, 4, 3, 0)]
)
SWEEP_SHAPES = {"gdn_in_proj tp4": 2560, "gdn_out_proj/o_proj tp4": 1536}


def _weights(N, K, n, gen):
    out = []
    for _ in range(n):
        w_q = (torch.randn((N, K), generator=gen, device="cuda") * 80).clamp(-448, 448).to(torch.float8_e4m3fn)
        w_s = torch.rand(((N + 127) // 128, K // 128), generator=gen, device="cuda") * 0.005 + 0.005
        out.append((w_q, w_s))
    return out


def run(bw: float, sweep: bool = False):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    node = _bench.node_overhead_us()
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s; empty kernel node {node:.2f} us", flush=True)
    rows, sweep_rows = [], []
    for name, (N, K) in SHAPES.items():
        nc = _bench.copies_for(N * K)
        ws = _weights(N, K, nc, gen)
        xs = {M: torch.randn((M, K), generator=gen, device="cuda").to(torch.bfloat16) for M in MS}
        if sweep and name in SWEEP_SHAPES:
            r64 = {M: ref.fp8_block_linear_fp64(xs[M], *ws[0]) for M in (1, 16)}

            def check(c):
                return all(float((tk.fp8_block_linear(xs[M], *ws[0], config=c).double() - r64[M]).norm()
                                 / r64[M].norm()) < 1e-2 for M in (1, 16))

            def time_fn(c, M):
                return _bench.graph_time_us(lambda x, a, b: tk.fp8_block_linear(x, a, b, config=c),
                                            [(xs[M], a, b) for a, b in ws], replays=10)["us"]

            best, r = _bench.sweep(f"fp8 {name}", SWEEP, time_fn, check)
            sweep_rows += r
            if best is not None:
                upd = {f"{n}x{k}": list(best) for n, k in ALL_SHARDS if k == SWEEP_SHAPES[name]
                       or (SWEEP_SHAPES[name] == 2560 and k != 1536 and (n, k) != (2560, 3072))}
                if SWEEP_SHAPES[name] == 1536:
                    upd["2560x3072"] = list(best)
                _bench.save_tuned(tk, upd)
        cfg = tk.default_config(N, K)
        bf = [torch.randn((N, K), generator=gen, device="cuda").to(torch.bfloat16)
              for _ in range(_bench.copies_for(2 * N * K))]
        for M in MS:
            x = xs[M]
            args = [(x, a, b) for a, b in ws]
            row = _bench.row(
                f"fp8_block_linear {name} {N}x{K}", M, lambda x, a, b: tk.fp8_block_linear_stock(x, a, b, config=cfg),
                lambda x, a, b: tk.fp8_block_linear(x, a, b, config=cfg),
                args, args, N * K + 4 * ((N + 127) // 128) * (K // 128) + 2 * M * K + 2 * M * N, bw, nodes=False)
            row["cfg"] = str(cfg)
            row["L2-hot fused us"] = _bench.graph_time_us(
                lambda x, a, b: tk.fp8_block_linear(x, a, b, config=cfg), [args[0]] * len(args))["us"]
            row["cuBLAS bf16 us"] = _bench.graph_time_us(lambda x, w: F.linear(x, w), [(x, w) for w in bf])["us"]
            row["vs cuBLAS"] = row["cuBLAS bf16 us"] / row["fused us"]
            with _bench.env(R9K_PDL="1"):
                row["fused pdl us"] = _bench.graph_time_us(
                    lambda x, a, b: tk.fp8_block_linear(x, a, b, config=cfg), args)["us"]
            if M % 16 == 0:
                try:
                    sa = torch.ones((M, 1), device="cuda")
                    sb = torch.ones((1, N), device="cuda")
                    row["cuBLASLt fp8 us"] = _bench.graph_time_us(
                        lambda x8, w: torch._scaled_mm(x8, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
                        [(x.to(torch.float8_e4m3fn), a) for a, _ in ws])["us"]
                except Exception as exc:  # noqa: BLE001 - report, do not guess
                    row["cuBLASLt fp8 us"] = f"n/a ({type(exc).__name__})"
            rows.append(row)
            print(row, flush=True)
        del ws, bf
        torch.cuda.empty_cache()
    rows.append({"op": "copy bandwidth TB/s", "stock us": bw / 1e12})
    rows.append({"op": "empty kernel node us", "stock us": node})
    return rows, sweep_rows


COLS = ["op", "M", "stock us", "fused us", "fused pdl us", "speedup", "launches s/f", "floor us", "bw frac",
        "L2-hot fused us", "cuBLAS bf16 us", "vs cuBLAS", "cuBLASLt fp8 us", "cfg"]
