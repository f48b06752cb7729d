"""Block-fp8 dense linear with fused activation quant (op ``fp8_block_linear``, variant
``fp8_block_fused_act_quant``, knob R9K_FP8_QA).

``fp8_block_linear(x, w_q, w_s, out=None) -> y``: x [M, K] bf16 (K % 128 == 0), w_q [N, K] float8_e4m3fn and
w_s [ceil(N/128), K/128] fp32 as in the checkpoint, y [M, N] bf16. Stock = the quant launch + the GEMM launch;
fused = one launch (the quant in the A-load) for M <= 16."""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .triton_kernel import fp8_block_linear, fp8_block_linear_stock, quant_group128_fp8

register(KernelOp(name="fp8_block_linear", variant="fp8_block_fused_act_quant",
                  stock=triton_kernel.fp8_block_linear_stock, fused=triton_kernel.fp8_block_linear,
                  fused_values=frozenset({"1"})))

__all__ = ["fp8_block_linear", "fp8_block_linear_stock", "quant_group128_fp8", "reference", "triton_kernel"]
