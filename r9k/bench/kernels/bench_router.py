"""Benchmark: router GEMM (fused split-K Triton vs cuBLAS F.linear) and fused routing (one launch vs
PyTorch softmax + topk + renormalise), on a GPU.

    python -m r9k.bench.kernels router [--sweep] [--json FILE]

``--sweep`` times tile configs for the 512 x 2560 GEMM and warp counts for the routing kernel, checks
each, and writes the winners into tuned_<device>.json (the gate tests then run on them).
"""
from __future__ import annotations

import torch

from ...kernels._triton import skinny_gemm as sk
from .. import timing as _bench
from ...kernels.router import reference as ref
from ...kernels.router import triton_kernel as tk

MS = (1, 4, 8, 16)
E, K = 512, 2560
SWEEP = [(16, 128, 8, 4, 3), (16, 128, 16, 4, 3), (16, 64, 16, 4, 3), (16, 64, 32, 4, 3), (32, 128, 8, 4, 3),
         (32, 128, 16, 4, 3), (32, 64, 16, 4, 3), (32, 64, 32, 4, 3), (32, 128, 16, 2, 3), (16, 64, 32, 2, 3), (16, 128, 16, 1, 3),
         (16, 64, 32, 1, 3), (16, 128, 8, 4, 1, 1), (32, 128, 8, 4, 1, 1), (16, 256, 4, 4, 1, 1), (32, 128, 4, 4, 1, 1),
         (16, 128, 4, 4, 2, 1), (16, 128, 8, 2, 1, 1),
         # one or two 128-column chunks a program, all loads up front
         (16, 128, 20, 4, 1, 1), (32, 128, 20, 4, 1, 1), (16, 128, 10, 4, 1, 1), (32, 128, 10, 4, 1, 1),
         (16, 256, 10, 4, 1, 1), (16, 128, 20, 2, 1, 1), (64, 128, 20, 4, 1, 1)]


def run(bw: float, sweep: bool = False):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(99)
    nc = _bench.copies_for(E * K * 2)
    ws = [(torch.randn((E, K), generator=gen, device="cuda") * 0.02).to(torch.bfloat16) for _ in range(nc)]
    xs = {M: torch.randn((M, K), generator=gen, device="cuda").to(torch.bfloat16) for M in MS}
    ls = {M: [(torch.randn((M, E), generator=gen, device="cuda") * 2).to(torch.bfloat16) for _ in range(32)]
          for M in MS}
    sweep_rows = []
    if sweep:
        exact = {M: (xs[M].double() @ ws[0].double().t()).to(torch.bfloat16) for M in (1, 16)}

        def check(c):
            return all(int((tk.skinny_gemm(xs[M], ws[0], config=c) != exact[M]).sum())
                       <= max(2, int(0.002 * exact[M].numel())) for M in (1, 16))

        def time_fn(c, M):
            return _bench.graph_time_us(lambda x, w: tk.skinny_gemm(x, w, config=c), [(xs[M], w) for w in ws],
                                        replays=10)["us"]

        best, r = _bench.sweep("router 512x2560", SWEEP, time_fn, check)
        sweep_rows += r
        if best is not None:
            _bench.save_tuned(sk, {"skinny": {f"{E}x{K}": list(best)}})

        def rcheck(wn):
            for M in (1, 16):
                lo = ls[M][0]
                w, i = tk.moe_route(lo, 10, True, num_warps=wn)
                w2, i2 = ref.moe_route_torch(lo, 10, True)
                if not (torch.equal(i, i2) and (w - w2).abs().max().item() <= 2e-6):
                    return False
            return True

        def rtime(wn, M):
            return _bench.graph_time_us(lambda lo: tk.moe_route(lo, 10, True, num_warps=wn),
                                        [(lo,) for lo in ls[M]], replays=10)["us"]

        bw_, r = _bench.sweep("moe_route warps", (1, 2, 4, 8), rtime, rcheck)
        sweep_rows += r
        if bw_ is not None:
            _bench.save_tuned(tk, {"moe_route_warps": bw_})
    cfg = tk.default_skinny_config(E, K)
    rows = []
    for M in MS:
        x = xs[M]
        args = [(x, w) for w in ws]
        row = _bench.row("router_gemm 512x2560", M, ref.router_gemm, lambda x, w: tk.skinny_gemm(x, w, config=cfg),
                         args, args, E * K * 2 + M * K * 2 + M * E * 2, bw, nodes=False)
        row["cfg"] = str(cfg)
        row["L2-hot fused us"] = _bench.graph_time_us(lambda x, w: tk.skinny_gemm(x, w, config=cfg),
                                                      [args[0]] * len(args))["us"]
        rows.append(row)
        print(row, flush=True)
    for M in MS:
        args = [(lo,) for lo in ls[M]]
        row = _bench.row("moe_route E=512 k=10 renorm", M, lambda lo: ref.moe_route(lo, 10, True),
                         lambda lo: tk.moe_route(lo, 10, True), args, args, M * E * 2 + M * 10 * 8, bw, nodes=False)
        row["cfg"] = f"warps {tk.moe_route_warps()}"
        rows.append(row)
        print(row, flush=True)
    return rows, sweep_rows


COLS = ["op", "M", "stock us", "fused us", "speedup", "launches s/f", "floor us", "bw frac", "L2-hot fused us", "cfg"]
