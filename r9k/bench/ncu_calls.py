"""One launch of each GEMM-family fused kernel (fp8 block linear, router, hc mix, routing) at M = 16, for Nsight Compute (run under ``ncu
--profile-from-start off``): compiles and warms up first, then profiles one call of each inside
cudaProfilerStart/Stop. Used by ``scripts/gpu.sh ncu`` to say what bounds each kernel."""
from __future__ import annotations

import torch

from ..kernels.fp8_block import triton_kernel as fp8
from ..kernels.hc_mix import triton_kernel as hc
from ..kernels.router import triton_kernel as rt


def main() -> None:
    g = torch.Generator(device="cuda")
    g.manual_seed(5)
    M = 16
    x = torch.randn((M, 2560), generator=g, device="cuda").to(torch.bfloat16)
    w_q = (torch.randn((4096, 2560), generator=g, device="cuda") * 80).clamp(-448, 448).to(torch.float8_e4m3fn)
    w_s = torch.rand((32, 20), generator=g, device="cuda") * 0.005 + 0.005
    wr = (torch.randn((512, 2560), generator=g, device="cuda") * 0.02).to(torch.bfloat16)
    xn = torch.randn((M, 10240), generator=g, device="cuda").to(torch.bfloat16)
    wd = (torch.randn((336, 10240), generator=g, device="cuda") * 0.04).to(torch.bfloat16)
    wu = (torch.randn((10240, 320), generator=g, device="cuda") * 0.1).to(torch.bfloat16)
    lo = torch.randn((M, 512), generator=g, device="cuda").to(torch.bfloat16)

    def calls():
        fp8.fp8_block_linear(x, w_q, w_s)
        rt.router_gemm(x, wr)
        hc.hc_mix(xn, wd, wu)
        rt.moe_route(lo, 10, True)

    calls()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    calls()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
