"""Benchmark of the shared expert (MXFP4 weights, per-row fp8 activations, sigmoid gate) at the TP4 shard
(gate_up 320 x 2560, down 2560 x 160) and TP2 (640 x 2560, 2560 x 320): stock 8 launches vs fused 4, CUDA-graph
replay rotating over enough weight copies to exceed the L2 4x.
Run: ``python -m r9k.bench.kernels shared_expert``."""
from __future__ import annotations

from ..timing import copies_for, row

MS = (1, 4, 8, 16)
H = 2560


def _weights(I, copies):
    import torch

    from ...kernels.shared_expert.reference import prepare_shared_expert

    out = []
    for _ in range(copies):
        p1 = torch.randint(0, 256, (2 * I, H // 2), dtype=torch.uint8, device="cuda")
        s1 = torch.randint(118, 124, (2 * I, H // 32), dtype=torch.uint8, device="cuda")
        p2 = torch.randint(0, 256, (H, I // 2), dtype=torch.uint8, device="cuda")
        s2 = torch.randint(118, 124, (H, I // 32), dtype=torch.uint8, device="cuda")
        wg = (torch.randn(H, device="cuda") * 0.02).to(torch.bfloat16)
        out.append(prepare_shared_expert(p1, s1, p2, s2, wg))
    return out


def _sets(M, I):
    import torch

    W0 = _weights(I, 1)[0]
    copies = copies_for(W0.nbytes())
    Ws = _weights(I, copies)
    x = (torch.randn(M, H, device="cuda")).to(torch.bfloat16)
    out = torch.empty(M, H, device="cuda", dtype=torch.bfloat16)
    sets = [(x, W, out) for W in Ws]
    floor = W0.nbytes() + M * H * 2 * 2
    return sets, floor


def run(bw, sweep=False, tps=((4, 160), (2, 320))):
    from ...kernels.shared_expert import reference, triton_kernel

    rows = []
    for tp, I in tps:
        for M in MS:
            sets, floor = _sets(M, I)
            rows.append(row(f"shared_expert TP{tp}", M, reference.shared_expert, triton_kernel.shared_expert,
                            sets, sets, floor, bw))
    return rows

