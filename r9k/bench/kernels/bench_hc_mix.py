"""Benchmark: hyper-connection input mix, fused (2 launches, bf16 or fp8 W8A16 weights) vs the stock
sequence (cuBLAS down, hc_silu, cuBLAS up, gated mean: 4 launches), on a GPU.

    python -m r9k.bench.kernels hc_mix [--sweep] [--json FILE]

Also times the two cuBLAS GEMMs alone and our two kernels alone (the anchors' "hc down / hc up").
``--sweep`` times tile configs for the down GEMM (336 x 10240) and the up+mix kernel, checks each,
and writes the winners into the tuned_<device>.json files (the gate tests then run on them).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import timing as _bench
from ...kernels.hc_mix import reference as ref
from ...kernels.hc_mix import triton_kernel as tk
from ...kernels._triton import skinny_gemm as rk

MS = (1, 4, 8, 16)
HD, R, ND = 2560, 320, 336
COLS4 = 4 * HD
DOWN_SWEEP = [(16, 128, 8, 4, 3), (16, 128, 16, 4, 3), (16, 256, 16, 4, 3), (16, 128, 32, 4, 3),
              (32, 256, 16, 4, 3), (32, 256, 32, 4, 3), (16, 256, 16, 2, 3),
              (32, 256, 16, 2, 3), (16, 128, 32, 2, 3), (32, 128, 16, 4, 3), (16, 256, 16, 1, 3),
              (16, 256, 8, 4, 1, 1), (16, 128, 16, 4, 1, 1), (32, 256, 8, 4, 1, 1), (16, 256, 16, 4, 1, 1),
              # finer splits, every load of a split up front
              (16, 128, 40, 4, 1, 1), (16, 256, 20, 4, 1, 1), (16, 128, 20, 4, 1, 1), (16, 256, 40, 2, 1, 1),
              (32, 256, 20, 4, 1, 1), (16, 512, 20, 4, 1, 1), (16, 128, 80, 2, 1, 1)]
UP_SWEEP = [(16, 64, 4, 3), (32, 64, 4, 3), (32, 64, 2, 3), (32, 64, 8, 3), (64, 64, 4, 3), (64, 64, 8, 3),
            (32, 128, 4, 2), (16, 64, 2, 3), (16, 64, 1, 3),
            (16, 64, 4, 1, 1), (32, 64, 4, 1, 1), (16, 128, 4, 1, 1), (32, 64, 8, 1, 1)]


def _mods(n, gen):
    mods = []
    for _ in range(n):
        wd = (torch.randn((ND, COLS4), generator=gen, device="cuda") * 0.04).to(torch.bfloat16)
        wu = (torch.randn((COLS4, R), generator=gen, device="cuda") * 0.1).to(torch.bfloat16)
        mods.append((wd, wu, tk.prepare_hc_fp8(wd, wu)))
    return mods


def _sweep(mods, xs):
    wd0, wu0, _ = mods[0]
    ref_down = {M: rk.skinny_gemm(xs[M], wd0, epi_cols=R) for M in (1, 16)}

    def dcheck(c):
        return all(int((rk.skinny_gemm(xs[M], wd0, epi_cols=R, config=c) != ref_down[M]).sum())
                   <= max(4, int(0.005 * ref_down[M].numel())) for M in (1, 16))

    def dtime(c, M):
        return _bench.graph_time_us(lambda x, wd: rk.skinny_gemm(x, wd, epi_cols=R, config=c),
                                    [(xs[M], wd) for wd, _, _ in mods], replays=10)["us"]

    best, r1 = _bench.sweep("hc down+silu 336x10240", DOWN_SWEEP, dtime, dcheck)
    if best is not None:
        _bench.save_tuned(rk, {"skinny": {f"{ND}x{COLS4}": list(best)}})
    lora = {M: rk.skinny_gemm(xs[M], wd0, epi_cols=R)[:, :R] for M in MS}
    ref_up = {M: tk._up_mix(lora[M], wu0, None, xs[M], None, 4) for M in (1, 16)}

    def ucheck(c):
        return all(torch.equal(tk._up_mix(lora[M], wu0, None, xs[M], None, 4, config=c), ref_up[M])
                   for M in (1, 16))

    def utime(c, M):
        return _bench.graph_time_us(lambda x, wu: tk._up_mix(lora[M], wu, None, x, None, 4, config=c),
                                    [(xs[M], wu) for _, wu, _ in mods], replays=10)["us"]

    up_best, r2 = _bench.sweep("hc up+mix", UP_SWEEP, utime, ucheck)
    if up_best is not None:
        _bench.update_json(tk.TUNED_FILE, {"up_mix": list(up_best)})
        tk.UP_CONFIG = tuple(up_best)
    return r1 + r2


def run(bw: float, sweep: bool = False):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    mods = _mods(_bench.copies_for(2 * (ND * COLS4 + COLS4 * R)), gen)
    xs = {M: torch.randn((M, COLS4), generator=gen, device="cuda").to(torch.bfloat16) for M in MS}
    sweep_rows = _sweep(mods, xs) if sweep else []
    down_cfg, up_cfg = rk.default_skinny_config(ND, COLS4), tk.UP_CONFIG
    bytes_bf16 = 2 * (ND * COLS4 + COLS4 * R)
    bytes_fp8 = ND * COLS4 + COLS4 * R + 4 * (ND + COLS4)
    rows = []
    for M in MS:
        x = xs[M]
        act = 2 * M * COLS4 + 2 * M * (ND + HD)
        a16 = [(x, wd, wu) for wd, wu, _ in mods]
        a8 = [(x, *p) for _, _, p in mods]
        r = _bench.row("hc_mix bf16", M, ref.hc_mix, tk.hc_mix, a16, a16, bytes_bf16 + act, bw, nodes=False)
        r["cfg"] = f"down {down_cfg} up {up_cfg}"
        r["cuBLAS down us"] = _bench.graph_time_us(lambda x, wd, wu: F.linear(x, wd), a16)["us"]
        r["cuBLAS up us"] = _bench.graph_time_us(lambda x, wd, wu: F.linear(x[:, :R], wu), a16)["us"]
        r["r9k down us"] = _bench.graph_time_us(lambda x, wd, wu: rk.skinny_gemm(x, wd, epi_cols=R), a16)["us"]
        lo = rk.skinny_gemm(x, mods[0][0], epi_cols=R)[:, :R]
        r["r9k up+mix us"] = _bench.graph_time_us(lambda x, wd, wu: tk._up_mix(lo, wu, None, x, None, 4), a16)["us"]
        try:  # vLLM's own path (its hc_silu and gate-mix kernels from its sources; above 48 rows on the H200)
            from ...kernels._triton import vllm_peer

            r["vllm us"] = _bench.graph_time_us(
                lambda x, wd, wu: vllm_peer.hc_mix(x, wd, wu, lora_rank=R, hc_count=4), a16)["us"]
        except Exception as exc:  # noqa: BLE001 - vLLM's sources absent: reported, not guessed
            r["vllm us"] = f"n/a ({type(exc).__name__})"
        rows.append(r)
        print(r, flush=True)
        # fp8 W8A16 against the same stock (bf16, 4 launches): what turning R9K_HC_FP8_DECODE on buys
        r = _bench.row("hc_mix_fp8 (vs bf16 stock)", M, ref.hc_mix, tk.hc_mix_fp8, a16, a8, bytes_fp8 + act, bw,
                       nodes=False)
        r["cfg"] = f"down {down_cfg} up {up_cfg}"
        r["fused bf16 us"] = rows[-1]["fused us"]
        rows.append(r)
        print(r, flush=True)
    rows.append({"op": "hc fp8 copies bytes/module", "stock us": tk.hc_fp8_bytes(*mods[0][2])})
    return rows, sweep_rows


COLS = ["op", "M", "stock us", "fused us", "vllm us", "speedup", "launches s/f", "floor us", "bw frac", "cuBLAS down us",
        "cuBLAS up us", "r9k down us", "r9k up+mix us", "fused bf16 us", "cfg"]
