"""Hyper-connection input mix at decode widths: op ``hc_mix`` (variant ``hc_decode_mix``, knob
R9K_HC_MIX) on bf16 weights and op ``hc_mix_fp8`` (variant ``hc_fp8_decode``, knob R9K_HC_FP8_DECODE)
on fp8 copies with per-row scales (W8A16).

Signatures (stock and fused interchangeable per op):

* ``hc_mix(xn, w_down, w_up, out_buf=None, out_block=None) -> (buf, block_input)``:
  xn [M, 10240] bf16 (4 streams of 2560, unit column stride), w_down [336, 10240] bf16,
  w_up [10240, 320] bf16; buf [M, 336] bf16 (hc_silu'd lora in columns < 320, raw injection logits
  in 320..323), block_input [M, 2560] bf16. Stock: 4 launches; fused: 2 launches for M <= 16.
* ``prepare_hc_fp8(w_down, w_up) -> (down_q, down_s, up_q, up_s)``: once at load; e4m3 codes [N, K]
  and fp32 per-row scales. ``hc_fp8_bytes(down_q, down_s, up_q, up_s) -> int``: their device bytes.
* ``hc_mix_fp8(xn, down_q, down_s, up_q, up_s, out_buf=None, out_block=None) -> (buf, block_input)``.
  Stock: the plain-PyTorch W8A16 composition; fused: 2 launches for M <= 16.
"""
from ..ops import KernelOp, register

from . import reference, triton_kernel
from .triton_kernel import hc_fp8_bytes, hc_mix, hc_mix_fp8, prepare_hc_fp8

register(KernelOp(name="hc_mix", variant="hc_decode_mix", stock=reference.hc_mix,
                  fused=triton_kernel.hc_mix, fused_values=frozenset({"r9k"})))
register(KernelOp(name="hc_mix_fp8", variant="hc_fp8_decode", stock=reference.hc_mix_fp8,
                  fused=triton_kernel.hc_mix_fp8, fused_values=frozenset({"1"})))

__all__ = ["hc_mix", "hc_mix_fp8", "prepare_hc_fp8", "hc_fp8_bytes", "reference", "triton_kernel"]
