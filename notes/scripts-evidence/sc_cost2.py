import os, time
os.environ["TRITON_INTERPRET"] = "1"
import torch
from r9k.kernels import ops
from r9k.plugin import selfcheck
op = ops.get("router_gemm")
w = torch.empty((8, 128), dtype=torch.bfloat16)
t = time.perf_counter(); why = selfcheck.check(op.name, op.fused, op.stock, selfcheck.probe_linear(w)); a = time.perf_counter() - t
x, ww = selfcheck.probe_linear(w, seed=1)
t = time.perf_counter(); op.fused(x, ww); b = time.perf_counter() - t
t = time.perf_counter(); selfcheck.check(op.name, op.fused, op.stock, selfcheck.probe_linear(torch.empty((8, 256), dtype=torch.bfloat16))); c = time.perf_counter() - t
print(f"cpu-smoke router (4 x 128 -> 8): self-check {1000*a:.0f} ms (first kernel call in the process); "
      f"the same kernel's next call {1000*b:.0f} ms; a second shape (4 x 256 -> 8) {1000*c:.0f} ms; {why or 'within bound'}")
