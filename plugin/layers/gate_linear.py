"""``gate_linear`` (vLLM's MoE router layer) with this project's router GEMM (op ``router_gemm``).

Installed with ``GateLinear.register_oot`` (vLLM's out-of-tree registration of pluggable layers), so
every ``GateLinear(...)`` a model builds becomes an :class:`R9kGateLinear`. At construction, each
layer asks the dispatch table once which implementation of ``router_gemm`` to use; ``forward`` then
calls it through a torch custom op (``torch.ops.r9k.router_gemm_<impl>``), opaque to torch.compile, so
the compiled graph holds one call and the Triton kernel (or its interpreter on the CPU) runs at
execution time.

A layer the kernel does not cover (quantized gate, bias, weights not bf16, fp32 logits requested)
keeps vLLM's own forward; this is logged once per reason.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import torch
from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

from ..dispatch import Choice, get_table

logger = logging.getLogger("vllm.r9k")

OP = "router_gemm"
_TORCH_OPS: dict[str, object] = {}
_LOGGED: set[str] = set()


def torch_op(choice: Choice):
    """The torch custom op wrapping the chosen implementation (defined once per process)."""
    name = f"r9k::{choice.op}_{choice.impl}"
    if name in _TORCH_OPS:
        return _TORCH_OPS[name]
    fn: Callable = choice.fn

    @torch.library.custom_op(name, mutates_args=())
    def _op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return fn(x, w)

    @_op.register_fake
    def _fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x.new_empty((x.shape[0], w.shape[0]))

    _TORCH_OPS[name] = _op
    return _op


class R9kGateLinear(GateLinear):
    """GateLinear whose unquantized bf16 GEMM runs the op the dispatch table chose."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._r9k_op = None
        self._r9k_choice: Optional[Choice] = None
        table = get_table()
        choice = table.choose(OP, layer=self.prefix) if table is not None else None
        if choice is None:
            return
        reason = self._ineligible(self.out_dtype)
        if reason:
            self._log_once(reason)
            return
        self._r9k_choice = choice
        self._r9k_op = torch_op(choice)
        # On vLLM's CPU backend, weight loading would repack the weight for oneDNN and drop the plain
        # tensor; this (documented) layer attribute keeps it, with F.linear for vLLM's own path.
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

    def _log_once(self, reason: str) -> None:
        if reason not in _LOGGED:
            _LOGGED.add(reason)
            logger.warning("r9k: %s: %s; this layer keeps vLLM's own GateLinear forward", self.prefix, reason)

    def set_out_dtype(self, out_dtype: torch.dtype) -> None:
        super().set_out_dtype(out_dtype)
        if self._r9k_op is not None:
            reason = self._ineligible(out_dtype)
            if reason:
                self._log_once(reason)
                self._r9k_op = None

    def forward(self, x: torch.Tensor):
        if self._r9k_op is None or x.dtype != torch.bfloat16:
            return super().forward(x)
        return self._return(self._r9k_op(x, self.weight))
