"""Hyper-connection input mix at decode widths: op ``hc_mix`` (variant ``hc_decode_mix``, knob
R9K_HC_MIX) on bf16 weights and op ``hc_mix_fp8`` (variant ``hc_fp8_decode``, knob R9K_HC_FP8_DECODE) on fp8
copies with per-row scales (W8A16, made once at load by ``prepare_hc_fp8``).

``hc_mix(xn, w_down, w_up, out_buf=None, out_block=None) -> (buf [M, 336], block_input [M, 2560])`` and
``hc_mix_fp8(xn, down_q, down_s, up_q, up_s, ...)``: stock 4 launches (fp8: plain PyTorch), fused 2 for M <= 16."""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .triton_kernel import hc_fp8_bytes, hc_mix, hc_mix_fp8, prepare_hc_fp8

register(KernelOp(name="hc_mix", variant="hc_decode_mix", stock=reference.hc_mix,
                  fused=triton_kernel.hc_mix, fused_values=frozenset({"r9k"})))
register(KernelOp(name="hc_mix_fp8", variant="hc_fp8_decode", stock=reference.hc_mix_fp8,
                  fused=triton_kernel.hc_mix_fp8, fused_values=frozenset({"1"})))

__all__ = ["hc_mix", "hc_mix_fp8", "prepare_hc_fp8", "hc_fp8_bytes", "reference", "triton_kernel"]
