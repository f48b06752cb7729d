#!/usr/bin/env python3
"""The op-sum model's prediction for the served gpu-qwen2-moe pair (``bash scripts/gpu.sh serve`` runs it after the
servers are gone; notes/gpu-serve.md): per batch M, the shared expert (the op the fused profile switches on) timed
as CUDA-graph replays at the checkpoint's shapes, stock (vLLM's path: cuBLAS ``F.linear`` GEMMs, the sigmoid, the
product, and vLLM's ``_C.silu_and_mul`` as a labelled stand-in for the served server's Inductor-compiled native
form) against the fused MXFP4 kernel on the same weights snapped to MXFP4. A step saves layers x the difference.
Printed per M; written to ``--out`` as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", default="1,4,8,16")
    a = ap.parse_args()
    import triton.testing

    from r9k.kernels.shared_expert import prepare_shared_expert, quantize_mxfp4
    from r9k.kernels.shared_expert import triton_kernel as sk
    from r9k.plugin.tiny_model import H200_QWEN2_MOE as c

    try:
        import vllm._custom_ops  # noqa: F401 - registers torch.ops._C.silu_and_mul
        silu_src = "vLLM's _C.silu_and_mul (stand-in for the served server's Inductor-compiled native form)"

        def silu_mul(gu):
            out = torch.empty(gu.shape[0], gu.shape[1] // 2, dtype=gu.dtype, device=gu.device)
            torch.ops._C.silu_and_mul(out, gu)
            return out
    except Exception as exc:  # noqa: BLE001
        silu_src = f"torch (vLLM's op not loadable: {type(exc).__name__})"

        def silu_mul(gu):
            g, u = gu.chunk(2, dim=-1)
            return F.silu(g) * u

    dev = "cuda"
    H, I, L = c["hidden_size"], c["shared_expert_intermediate_size"], c["num_hidden_layers"]
    g = torch.Generator(device=dev).manual_seed(0)
    wgu = (torch.randn(2 * I, H, device=dev, generator=g) * H ** -0.5)
    wd = (torch.randn(H, I, device=dev, generator=g) * I ** -0.5)
    wg = (torch.randn(1, H, device=dev, generator=g) * H ** -0.5).to(torch.bfloat16)
    q1, s1 = quantize_mxfp4(wgu)
    q2, s2 = quantize_mxfp4(wd)
    sw = prepare_shared_expert(q1, s1, q2, s2, wg)
    wgu, wd = wgu.to(torch.bfloat16), wd.to(torch.bfloat16)

    def stock_se(x):
        return torch.sigmoid(F.linear(x, wg)) * F.linear(silu_mul(F.linear(x, wgu)), wd)

    rows = []
    for M in [int(m) for m in a.rows.split(",")]:
        x = torch.randn(M, H, device=dev, generator=g).to(torch.bfloat16)
        t = {
            "shared_stock": triton.testing.do_bench_cudagraph(lambda: stock_se(x), rep=200),
            "shared_fused": triton.testing.do_bench_cudagraph(lambda: sk.shared_expert(x, sw), rep=200),
        }
        save_ms = L * (t["shared_stock"] - t["shared_fused"])
        rows.append({"M": M, **{k: v * 1e3 for k, v in t.items()}, "step_saving_ms": save_ms})
        print(f"M={M:<3} shared expert {t['shared_stock']*1e3:7.2f} -> {t['shared_fused']*1e3:7.2f} us   "
              f"a step ({L} layers) saves {save_ms:.4f} ms", flush=True)
    res = {"layers": L, "silu_and_mul": silu_src, "device": torch.cuda.get_device_name(0), "rows": rows,
           "units": "us per call (CUDA-graph replay median); step_saving_ms per decode step"}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
