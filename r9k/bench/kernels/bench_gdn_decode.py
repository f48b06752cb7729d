"""Benchmark of the GDN speculative-decode core: stock PyTorch composition vs the fused kernel, CUDA-graph replay
rotating over 36 state pools, Flash-Next TP4 (4 key / 12 value heads), M = 1 to 64 tokens (up to 16 requests x 4
MTP-3 candidates), and a sweep of the value-row block and num_warps. ``python -m r9k.bench.kernels gdn_decode``.
"""
from __future__ import annotations

import functools
from ...kernels._triton import vllm_peer
from ..timing import COLS as _COLS, env, graph_time_us, row

POOLS = 36
CASES = [(1, [1], [1]), (4, [4], [2]), (8, [4, 4], [1, 3]), (16, [4] * 4, [1, 2, 3, 4]),
         (32, [4] * 8, [1, 2, 3, 4] * 2), (64, [4] * 16, [1, 2, 3, 4] * 4)]


def _sets(M, lens, acc, seed=0):
    import torch

    from ...kernels.gdn_decode._cases import make_batch

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


COLS = _COLS + ["fused p10-p90", "vllm us", "vllm layer us", "vs vllm", "fused pdl us", "fused bf16-state us"]


def run(bw, sweep=False, sweep_cfgs=((128, 8), (128, 16), (64, 4), (64, 8), (32, 2), (32, 4), (16, 2), (16, 4))):
    """Rows: stock composition vs the fused kernel, plus vLLM's own kernel + gated norm (from its sources, when
    here), the fused kernel without programmatic dependent launch and on a bf16 state; and a block/warps sweep
    (always: it writes no tuned file)."""
    import torch

    from ...kernels.gdn_decode import reference, triton_kernel

    ok, why = vllm_peer.available()
    if not ok:
        print(f"gdn bench: vLLM's kernel not measured ({why})")
    rows, sweep = [], []
    for M, lens, acc in CASES:
        sets, floor_bytes = _sets(M, lens, acc)
        r = row("gdn_decode", M, reference.gdn_spec_decode_core, triton_kernel.gdn_spec_decode_core,
                sets, sets, floor_bytes, bw)
        if ok:
            # as vLLM's layer runs it (its wrapper's q/k/v/a/b/z copies included), and its two kernels alone
            r["vllm layer us"] = graph_time_us(vllm_peer.gdn_core, sets)["us"]
            two = []
            for st in sets:
                kw = dict(zip(ARGS, st))
                q, k, v, a, b, z2 = vllm_peer.gdn_split(kw["mixed_qkv"], kw["z"], kw["b"], kw["a"], 4, 12)
                two.append((q, k, v, a, b, z2, kw["A_log"], kw["dt_bias"], kw["norm_weight"], kw["state"],
                            kw["cu_seqlens"], kw["num_accepted"], kw["state_indices"]))
            r["vllm us"] = graph_time_us(vllm_peer.gdn_two_launches, two)["us"]
            r["vs vllm"] = r["vllm us"] / r["fused us"]
            del two
        with env(R9K_PDL="1"):
            r["fused pdl us"] = graph_time_us(triton_kernel.gdn_spec_decode_core, sets)["us"]
        i_state = ARGS.index("state")
        bf = [s[:i_state] + (s[i_state].to(torch.bfloat16),) + s[i_state + 1:] for s in sets]
        r["fused bf16-state us"] = graph_time_us(triton_kernel.gdn_spec_decode_core, bf)["us"]
        del bf
        rows.append(r)
        for bv, w in sweep_cfgs:
            fn = functools.partial(triton_kernel.gdn_spec_decode_core, num_warps=w, block_v=bv)
            sweep.append({"M": M, "block_v": bv, "num_warps": w, "fused us": graph_time_us(fn, sets)["us"]})
    return rows, sweep
