"""``gate_linear`` (vLLM's MoE router layer) with this project's router GEMM (op ``router_gemm``).

Installed with ``GateLinear.register_oot``: each :class:`R9kGateLinear` asks the dispatch table once, at
construction, and ``forward`` calls the choice through an opaque torch custom op. Per layer: installed, or kept
on vLLM's forward with the reason (:meth:`R9kGateLinear._ineligible`, also when a quant method asks for other
logits later through ``set_out_dtype``). Per call: ``fused`` for 1..16 rows, ``fallback:rows>16`` above (the
kernel's wrapper runs the stock GEMM there).
"""
from __future__ import annotations

import logging
from typing import Optional

import torch
from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

from .. import report
from ...registry.availability import Decision
from . import _common
from ..selfcheck import probe_linear

logger = logging.getLogger("vllm.r9k")

OP = "router_gemm"
#: rows the fused kernel covers (r9k.kernels.router.triton_kernel.MAX_M); more rows run the stock GEMM
FUSED_MAX_ROWS = 16


def torch_op(choice: Decision):
    """The torch custom op wrapping the chosen implementation (defined once per process)."""
    fn = choice.fn
    fused = choice.state == "fused"

    def impl(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if not fused:
            report.hit(OP, "stock")
        elif x.shape[0] > FUSED_MAX_ROWS:
            report.hit(OP, f"fallback:rows>{FUSED_MAX_ROWS}")
        else:
            report.hit(OP, "fused")
        return fn(x, w)

    def fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.new_empty((x.shape[0], w.shape[0]))

    return _common.opaque(f"{choice.op}_{choice.state}", "(Tensor x, Tensor w) -> Tensor", impl, fake)


def _probe(weight):
    """The self-check's arguments: 4 rows (a decode width) at this gate's hidden size and expert count."""
    return probe_linear(weight, rows=4)


class R9kGateLinear(GateLinear):
    """GateLinear whose unquantized bf16 GEMM runs the op the dispatch table chose."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._r9k_op = None
        self._r9k_choice: Optional[Decision] = None
        choice = _common.eligible_choice(OP, self.prefix, lambda: self._ineligible(self.out_dtype),
                                         probe=lambda: _probe(self.weight))
        if choice is None:
            return
        self._r9k_choice = choice
        self._r9k_op = torch_op(choice)
        _common.installed(OP, self.prefix)
        # keeps the plain weight on vLLM's CPU backend (no oneDNN repack), with F.linear for vLLM's own path
        self._cpu_skip_gemm_dispatch = True

    def _ineligible(self, out_dtype) -> str:
        if not self.is_unquantized:
            return "quantized gate"
        if self.bias is not None:
            return "gate with bias"
        if self.weight.dtype != torch.bfloat16:
            return f"gate weights in {self.weight.dtype}, the kernel takes bf16"
        if out_dtype not in (None, torch.bfloat16):
            return f"router logits requested in {out_dtype}, the kernel writes bf16"
        return ""

    def set_out_dtype(self, out_dtype: torch.dtype) -> None:
        super().set_out_dtype(out_dtype)
        if self._r9k_op is not None:
            reason = self._ineligible(out_dtype)
            if reason:
                report.relabel(OP, self.prefix, False, reason)
                _common.keep_logged(OP, self.prefix, reason)
                self._r9k_op = None

    def forward(self, x: torch.Tensor):
        if self._r9k_op is None or x.dtype != torch.bfloat16:
            return super().forward(x)
        return self._return(self._r9k_op(x, self.weight))
