"""Benchmark of the shared expert (MXFP4 weights, per-row fp8 activations, sigmoid gate) at the TP4 shard
(gate_up 320 x 2560, down 2560 x 160) and TP2 (640 x 2560, 2560 x 320): stock 8 launches vs fused 4, CUDA-graph
replay rotating over enough weight copies to exceed the L2 4x. Also a small sweep of the gate_up GEMM config.
Run: ``python -m r9k.bench.kernels shared_expert``."""
from __future__ import annotations

import functools
from ..timing import copies_for, graph_time_us, row

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


def run(bw, tps=((4, 160), (2, 320))):
    from ...kernels.shared_expert import reference, triton_kernel

    rows = []
    for tp, I in tps:
        for M in MS:
            sets, floor = _sets(M, I)
            rows.append(row(f"shared_expert TP{tp}", M, reference.shared_expert, triton_kernel.shared_expert,
                            sets, sets, floor, bw))
    return rows


def sweep_gemm(configs=(None, (16, 16, 256, 4, 2, 1), (16, 16, 256, 4, 2, 10), (16, 32, 256, 4, 2, 5),
                        (16, 16, 128, 4, 2, 10), (16, 16, 512, 4, 2, 5), (16, 16, 256, 8, 2, 5))):
    """gate_up GEMM alone (TP4, M=4) under a few (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, SPLIT_K) configs
    (None = the default heuristic), then the down GEMM."""
    import torch

    from ...kernels.shared_expert import triton_kernel

    sets, _ = _sets(4, 160)
    q, s = triton_kernel.row_quant(sets[0][0])
    res = []
    for cfg in configs:
        fn = functools.partial(triton_kernel.mxfp4_gemm, config=cfg)
        args = [(q, s, W.w1_packed, W.w1_scales) for (_, W, _) in sets]
        res.append({"config": str(cfg), "gate_up us": graph_time_us(fn, args)["us"]})
    cfgd = [(q, s, W.w2_packed, W.w2_scales) for (_, W, _) in sets]
    aq = (torch.randn(4, 160, device="cuda") * 100).to(torch.float8_e4m3fn)
    for cfg in (None, (16, 64, 256, 4, 1, 1), (16, 16, 256, 4, 1, 1), (16, 32, 64, 4, 3, 1), (16, 32, 64, 4, 2, 3)):
        fn = functools.partial(triton_kernel.mxfp4_gemm, config=cfg)
        args = [(aq, s, a[2], a[3]) for a in cfgd]
        res.append({"config": "down " + str(cfg), "gate_up us": graph_time_us(fn, args)["us"]})
    return res
