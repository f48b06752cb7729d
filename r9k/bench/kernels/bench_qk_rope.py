"""Benchmark of the attention q/k norm + MRoPE + gate split at the TP4 shard (6 q heads + gate, 1 kv head,
head dim 256, 64 rotary dims, interleaved MRoPE [11, 11, 10], theta 1e7), stock eager ops vs the fused kernel,
CUDA-graph replay over 8 input copies. Run: ``python -m r9k.bench.kernels qk_rope``."""
from __future__ import annotations

from ..timing import row

MS = (1, 4, 8, 16)
HQ, HKV, D = 6, 1, 256


def _sets(M, copies=8):
    import torch

    from ...kernels.qsa_glue.reference import rope_cos_sin_cache

    from ...kernels.qk_rope.reference import ROPE_THETA, ROTARY_DIM

    cache = rope_cos_sin_cache(ROTARY_DIM, 65536, ROPE_THETA, device="cuda")
    wq = (torch.randn(D, device="cuda") * 0.2).to(torch.bfloat16)
    wk = (torch.randn(D, device="cuda") * 0.2).to(torch.bfloat16)
    width = (2 * HQ + 2 * HKV) * D
    sets = []
    for _ in range(copies):
        qkv = torch.randn(M, width, device="cuda").to(torch.bfloat16)
        pos = torch.randint(0, 65536, (3, M), device="cuda")
        sets.append((qkv, wq, wk, pos, cache, HQ, HKV, D))
    floor = M * (2 * HQ + HKV) * D * 2 * 2
    return sets, floor


def run(bw, sweep=False):
    from ...kernels.qk_rope import reference, triton_kernel

    rows = []
    for M in MS:
        sets, floor = _sets(M)
        rows.append(row("qk_norm_rope", M, reference.qk_norm_rope_gate, triton_kernel.qk_norm_rope_gate, sets,
                        sets, floor, bw))
    return rows
