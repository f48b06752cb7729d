"""Benchmark of the hyper-connection combine + grouped norm (4 streams of 2560): the plain composition, vLLM's
own one-launch kernel (``_hc_combine_norm`` from vLLM's sources, when they are here) and this project's kernel
with and without programmatic dependent launch; CUDA-graph replay over 16 input copies. Run through
``python -m r9k.bench.kernels hc_norm``."""
from __future__ import annotations

from ...kernels._triton import vllm_peer
from ..timing import COLS as _COLS, env, graph_time_us, row

MS = (1, 4, 8, 16, 64)
HC, HD = 4, 2560
COLS = _COLS + ["fused p10-p90", "vllm us", "vs vllm", "fused pdl us", "fused w4 us", "fused w16 us"]


def _sets(M, copies=16):
    import torch

    sets = []
    for _ in range(copies):
        res = torch.randn(M, HC * HD, device="cuda").to(torch.bfloat16)
        blk = torch.randn(M, HD, device="cuda").to(torch.bfloat16)
        inj = torch.randn(M, 336, device="cuda").to(torch.bfloat16)[:, 320:324]
        w = (torch.randn(HC * HD, device="cuda") * 0.1).to(torch.bfloat16)
        sets.append((res, blk, inj, w, 1e-6, HC))
    floor = M * (HC * HD * 2 * 3 + HD * 2) + HC * HD * 2  # res in, out + y out, blk in, weight
    return sets, floor


def run(bw, sweep=False):
    from ...kernels.hc_norm import reference, triton_kernel

    ok, why = vllm_peer.available()
    rows = []
    for M in MS:
        sets, floor = _sets(M)
        r = row("hc_combine_norm", M, reference.hc_combine_norm, triton_kernel.hc_combine_norm, sets, sets,
                floor, bw)
        if ok:
            r["vllm us"] = graph_time_us(vllm_peer.hc_combine_norm, sets)["us"]
            r["vs vllm"] = r["vllm us"] / r["fused us"]
        with env(R9K_PDL="1"):
            r["fused pdl us"] = graph_time_us(triton_kernel.hc_combine_norm, sets)["us"]
        for w in (4, 16):
            r[f"fused w{w} us"] = graph_time_us(
                lambda *a, w=w: triton_kernel.hc_combine_norm(*a, num_warps=w), sets)["us"]
        rows.append(r)
    if not ok:
        print(f"hc_norm bench: vLLM's kernel not measured ({why})")
    return rows
