"""Block-fp8 dense linear with fused activation quant (op ``fp8_block_linear``, variant
``fp8_block_fused_act_quant``, knob R9K_FP8_QA; the block kernel itself is variant
``fp8_block_linears``, knob R9K_FP8_BLOCK=block).

Signature (stock and fused interchangeable):
``fp8_block_linear(x, w_q, w_s, out=None) -> y``: x [M, K] bf16 (unit column stride, K % 128 == 0),
w_q [N, K] float8_e4m3fn (checkpoint bytes, contiguous), w_s [ceil(N/128), K/128] fp32 block scales
(the checkpoint's ``weight_scale_inv``, a dequant multiplier), y [M, N] bf16.
Stock = ``quant_group128_fp8`` launch + GEMM launch; fused = one launch (quant in the A-load) for M <= 16.
Also exported: ``quant_group128_fp8(x, out_q=None, out_s=None) -> (qa [M, K] e4m3, sa [M, K/128] fp32)``.
No weight preparation is needed: the kernels read the checkpoint layout.
"""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .triton_kernel import fp8_block_linear, fp8_block_linear_stock, quant_group128_fp8

register(KernelOp(name="fp8_block_linear", variant="fp8_block_fused_act_quant",
                  stock=triton_kernel.fp8_block_linear_stock, fused=triton_kernel.fp8_block_linear,
                  fused_values=frozenset({"1"})))

__all__ = ["fp8_block_linear", "fp8_block_linear_stock", "quant_group128_fp8", "reference", "triton_kernel"]
