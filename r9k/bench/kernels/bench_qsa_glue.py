"""Benchmark of the QSA indexer glue (Gemma norm + neox rope of the 4 indexer query heads x 128, 32 rotary dims,
q a strided view of the [T, 640] projection row, positions a stride-3 column), stock ops vs the fused kernel,
CUDA-graph replay over 8 input copies. Run: ``python -m r9k.bench.kernels qsa_glue``."""
from __future__ import annotations

from ..timing import row

MS = (1, 4, 8, 16)


def _sets(M, copies=8):
    import torch

    from ...kernels.qsa_glue.reference import rope_cos_sin_cache

    cache = rope_cos_sin_cache(32, 65536, 10000.0, device="cuda")
    w = (torch.randn(128, device="cuda") * 0.2).to(torch.bfloat16)
    sets = []
    for _ in range(copies):
        row = torch.randn(M, 640, device="cuda").to(torch.bfloat16)
        pos = torch.randint(0, 65536, (M, 3), device="cuda")[:, 0]
        out = torch.empty(M, 4, 128, device="cuda", dtype=torch.bfloat16)
        sets.append((row[:, :512].view(M, 4, 128), w, pos, cache, 1e-6, None, True, out))
    floor = M * 4 * 128 * 2 * 2 + M * 32 * 2
    return sets, floor


def run(bw, sweep=False):
    from ...kernels.qsa_glue import reference, triton_kernel

    rows = []
    for M in MS:
        sets, floor = _sets(M)
        rows.append(row("qsa_glue", M, reference.gemma_norm_rope, triton_kernel.gemma_norm_rope, sets, sets,
                        floor, bw))
    return rows
