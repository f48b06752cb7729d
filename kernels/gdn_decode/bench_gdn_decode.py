"""Benchmark of the GDN speculative-decode core: stock PyTorch composition vs the fused kernel, CUDA-graph
replay rotating over 36 state pools (as the anchor in h200-anchors.md), Flash-Next TP4 (4 key / 12 value heads).

M = tokens: 1 (one request, one candidate), 4, 8, 16 (1, 2, 4 requests x 4 MTP-3 candidates). Also a sweep of
the fused kernel's value-row block and num_warps. Run: ``python -m r9k.kernels.gdn_decode.bench_gdn_decode``.
"""
from __future__ import annotations

import functools

POOLS = 36
CASES = [(1, [1], [1]), (4, [4], [2]), (8, [4, 4], [1, 3]), (16, [4] * 4, [1, 2, 3, 4])]


def _sets(M, lens, acc, seed=0):
    import torch

    from ._cases import make_batch

    kw, states = make_batch(seed, "cuda", lens, acc, Hk=4, Hv=12, D=128, S=4, pools=POOLS, extra_slots=0)
    out = torch.empty((M, 12 * 128), dtype=torch.bfloat16, device="cuda")
    sets = []
    for st in states:
        k = dict(kw, state=st, out=out)
        sets.append(tuple(k[n] for n in ARGS))
    state_bytes = states[0][0].numel() * 4  # one slot, all heads
    n_req = len(lens)
    floor_bytes = n_req * state_bytes + M * state_bytes + M * (2560 + 1536 + 24 + 1536) * 2
    return sets, floor_bytes


ARGS = ["mixed_qkv", "z", "b", "a", "A_log", "dt_bias", "norm_weight", "state", "cu_seqlens", "num_accepted",
        "state_indices", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "eps", "gate", "scale", "out"]


def run(bw, sweep_cfgs=((128, 8), (128, 16), (64, 4), (64, 8), (32, 2), (32, 4), (16, 2), (16, 4))):
    from . import reference, triton_kernel
    from ._part2_bench import row

    rows, sweep = [], []
    for M, lens, acc in CASES:
        sets, floor_bytes = _sets(M, lens, acc)
        rows.append(row("gdn_decode", M, reference.gdn_spec_decode_core, triton_kernel.gdn_spec_decode_core,
                        sets, sets, floor_bytes, bw))
        from r9k.kernels._bench import graph_time_us
        for bv, w in sweep_cfgs:
            fn = functools.partial(triton_kernel.gdn_spec_decode_core, num_warps=w, block_v=bv)
            sweep.append({"M": M, "block_v": bv, "num_warps": w, "fused us": graph_time_us(fn, sets)["us"]})
    return rows, sweep


if __name__ == "__main__":
    from r9k.kernels._bench import fmt_table

    from ._part2_bench import COLS, main_bw

    bw = main_bw()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    rows, sweep = run(bw)
    print(fmt_table(rows, COLS + ["fused p10-p90"]))
    print(fmt_table(sweep, ["M", "block_v", "num_warps", "fused us"]))
