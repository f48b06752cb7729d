"""Benchmark: hyper-connection input mix, fused (2 launches, bf16 or fp8 W8A16 weights) vs the stock
sequence (cuBLAS down, hc_silu, cuBLAS up, gated mean: 4 launches), on a GPU.

    python -m r9k.kernels.hc_mix.bench_hc_mix [--sweep] [--json FILE]

Also times the two cuBLAS GEMMs alone and our two kernels alone (the anchors' "hc down / hc up").
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from r9k.kernels import _bench
from r9k.kernels.hc_mix import reference as ref
from r9k.kernels.hc_mix import triton_kernel as tk
from r9k.kernels.router import triton_kernel as rk

MS = (1, 4, 8, 16)
HD, R, ND = 2560, 320, 336
COLS4 = 4 * HD
DOWN_SWEEP = [(bn, bk, sp, 4, 3) for bn in (16, 32) for bk in (128, 256) for sp in (4, 8, 16)]
UP_SWEEP = [(bd, br, w, st) for bd in (16, 32) for br in (32, 64) for w in (4,) for st in (2, 3)]


def _mods(n, gen):
    mods = []
    for _ in range(n):
        wd = (torch.randn((ND, COLS4), generator=gen, device="cuda") * 0.04).to(torch.bfloat16)
        wu = (torch.randn((COLS4, R), generator=gen, device="cuda") * 0.1).to(torch.bfloat16)
        mods.append((wd, wu, tk.prepare_hc_fp8(wd, wu)))
    return mods


def _pick(name, cands, fn_for, xs, check):
    best = None
    rows = []
    for c in cands:
        tot, ok = 0.0, True
        for M in (1, 16):
            ok &= check(c, xs[M])
            t = _bench.graph_time_us(fn_for(c), [(xs[M], *a) for a in ARGS], replays=10)["us"]
            rows.append({"kernel": name, "cfg": str(c), "M": M, "us": t, "ok": ok})
            tot += t
        print(f"sweep {name} {c} total(M=1,16) {tot:.2f} ok={ok}", flush=True)
        if ok and (best is None or tot < best[0]):
            best = (tot, c)
    print(f"best {name}: {best[1]}", flush=True)
    return best[1], rows


ARGS: list = []


def run(sweep: bool = False):
    global ARGS
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    bw = _bench.copy_bandwidth()
    mods = _mods(_bench.copies_for(2 * (ND * COLS4 + COLS4 * R)), gen)
    xs = {M: torch.randn((M, COLS4), generator=gen, device="cuda").to(torch.bfloat16) for M in MS}
    down_cfg, up_cfg = tk.DOWN_CONFIG, tk.UP_CONFIG
    sweep_rows = []
    if sweep:
        wd0, wu0, _ = mods[0]
        ARGS = [(wd,) for wd, _, _ in mods]

        def dcheck(c, x):
            a = rk.skinny_gemm(x, wd0, epi_cols=R)
            b = rk.skinny_gemm(x, wd0, epi_cols=R, config=c)
            return int((a != b).sum()) <= max(4, int(0.005 * a.numel()))

        down_cfg, r1 = _pick("hc down+silu", DOWN_SWEEP,
                             lambda c: (lambda x, wd: rk.skinny_gemm(x, wd, epi_cols=R, config=c)), xs, dcheck)
        lora = {M: rk.skinny_gemm(xs[M], wd0, epi_cols=R)[:, :R] for M in MS}
        ARGS = [(wu,) for _, wu, _ in mods]

        def ucheck(c, x):
            lo = lora[x.shape[0]]
            a = tk._up_mix(lo, wu0, None, x, None, 4)
            b = tk._up_mix(lo, wu0, None, x, None, 4, config=c)
            return torch.equal(a, b)

        up_cfg, r2 = _pick("hc up+mix", UP_SWEEP,
                           lambda c: (lambda x, wu: tk._up_mix(lora[x.shape[0]], wu, None, x, None, 4, config=c)),
                           xs, ucheck)
        sweep_rows = r1 + r2
    bytes_bf16 = 2 * (ND * COLS4 + COLS4 * R)
    bytes_fp8 = ND * COLS4 + COLS4 * R + 4 * (ND + COLS4)
    rows = []
    for M in MS:
        x = xs[M]
        act = 2 * M * COLS4 + 2 * M * (ND + HD)
        a16 = [(x, wd, wu) for wd, wu, _ in mods]
        a8 = [(x, *p) for _, _, p in mods]
        fused16 = lambda x, wd, wu: tk.hc_mix(x, wd, wu, down_config=down_cfg, up_config=up_cfg)  # noqa: E731
        fused8 = lambda x, dq, ds, uq, us: tk.hc_mix_fp8(x, dq, ds, uq, us, down_config=down_cfg,  # noqa: E731
                                                         up_config=up_cfg)
        r = _bench.bench_row("hc_mix bf16", M, (ref.hc_mix, "stock"), (fused16, "fused"), a16, a16,
                             bytes_bf16 + act, bw)
        r["cfg"] = f"down {down_cfg} up {up_cfg}"
        r["cuBLAS down us"] = _bench.graph_time_us(lambda x, wd, wu: F.linear(x, wd), a16)["us"]
        r["cuBLAS up us"] = _bench.graph_time_us(lambda x, wd, wu: F.linear(x[:, :R], wu), a16)["us"]
        r["r9k down us"] = _bench.graph_time_us(
            lambda x, wd, wu: rk.skinny_gemm(x, wd, epi_cols=R, config=down_cfg), a16)["us"]
        lo = rk.skinny_gemm(x, mods[0][0], epi_cols=R)[:, :R]
        r["r9k up+mix us"] = _bench.graph_time_us(
            lambda x, wd, wu: tk._up_mix(lo, wu, None, x, None, 4, config=up_cfg), a16)["us"]
        rows.append(r)
        print(r, flush=True)
        # fp8 W8A16 against the same stock (bf16, 4 launches): what turning R9K_HC_FP8_DECODE on buys
        r = _bench.bench_row("hc_mix_fp8 (vs bf16 stock)", M, (ref.hc_mix, "stock"), (fused8, "fused"), a16, a8,
                             bytes_fp8 + act, bw)
        r["cfg"] = f"down {down_cfg} up {up_cfg}"
        r["fused bf16 us"] = rows[-1]["fused us"]
        rows.append(r)
        print(r, flush=True)
    rows.append({"op": "hc fp8 copies bytes/module", "M": "", "stock us": tk.hc_fp8_bytes(*mods[0][2])})
    return rows, sweep_rows


COLS = ["op", "M", "stock us", "fused us", "speedup", "launches s/f", "floor us", "bw frac", "cuBLAS down us",
        "cuBLAS up us", "r9k down us", "r9k up+mix us", "fused bf16 us", "cfg"]

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
