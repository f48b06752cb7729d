"""Benchmark: router GEMM (fused split-K Triton vs cuBLAS F.linear) and fused routing (one launch vs
PyTorch softmax + topk + renormalise), on a GPU.

    python -m r9k.kernels.router.bench_router [--sweep] [--json FILE]
"""
from __future__ import annotations

import argparse
import json

import torch

from r9k.kernels import _bench
from r9k.kernels.router import reference as ref
from r9k.kernels.router import triton_kernel as tk

MS = (1, 4, 8, 16)
E, K = 512, 2560
SWEEP = [(bn, bk, sp, 4, st) for bn in (16, 32) for bk in (128, 256) for sp in (2, 4, 8, 16) for st in (3,)
         if K // sp >= bk]


def run(sweep: bool = False):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(99)
    bw = _bench.copy_bandwidth()
    nc = _bench.copies_for(E * K * 2)
    ws = [(torch.randn((E, K), generator=gen, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(nc)]
    xs = {M: torch.randn((M, K), generator=gen, device="cuda").to(torch.bfloat16) for M in MS}
    cfg = tk.default_skinny_config(E, K)
    sweep_rows = []
    if sweep:
        best = None
        for c in SWEEP:
            tot, ok = 0.0, True
            for M in (1, 16):
                x = xs[M]
                y0 = ref.router_gemm_fp32_fallback(x, ws[0])
                y1 = tk.skinny_gemm(x, ws[0], config=c)
                ok &= int((y0 != y1).sum()) <= max(2, int(0.002 * y0.numel()))
                t = _bench.graph_time_us(lambda x, w, c=c: tk.skinny_gemm(x, w, config=c), [(x, w) for w in ws],
                                         replays=10)["us"]
                sweep_rows.append({"cfg": str(c), "M": M, "fused us": t, "ok": ok})
                tot += t
            print(f"sweep router {c} total(M=1,16) {tot:.2f} ok={ok}", flush=True)
            if ok and (best is None or tot < best[0]):
                best = (tot, c)
        cfg = best[1]
        print(f"best router: {cfg}", flush=True)
    rows = []
    for M in MS:
        x = xs[M]
        args = [(x, w) for w in ws]
        row = _bench.bench_row("router_gemm 512x2560", M, (ref.router_gemm, "stock"),
                               (lambda x, w: tk.skinny_gemm(x, w, config=cfg), "fused"), args, args,
                               E * K * 2 + M * K * 2 + M * E * 2, bw)
        row["cfg"] = str(cfg)
        rows.append(row)
        print(row, flush=True)
    for M in MS:
        ls = [(torch.randn((M, E), generator=gen, device="cuda") * 2).to(torch.bfloat16) for _ in range(32)]
        args = [(lo,) for lo in ls]
        row = _bench.bench_row("moe_route E=512 k=10 renorm", M,
                               (lambda lo: ref.moe_route(lo, 10, True), "stock"),
                               (lambda lo: tk.moe_route(lo, 10, True), "fused"), args, args,
                               M * E * 2 + M * 10 * 8, bw)
        rows.append(row)
        print(row, flush=True)
    return rows, sweep_rows


COLS = ["op", "M", "stock us", "fused us", "speedup", "launches s/f", "floor us", "bw frac", "cfg"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows, sweep_rows = run(a.sweep)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "sweep": sweep_rows}, f, indent=1, default=str)
    print(_bench.fmt_table(rows, COLS))
