"""The hyper-connection module of the plugin's Flash-Next: vLLM's ``GatedResidual`` as the stock path, this
project's ops where the dispatch table selects them (docs/semantics.md 3.1-3.3), each half chosen once at
construction (:meth:`HcOps.choose`):

* **combine + grouped norm** (op ``hc_combine_norm``): fold the previous block's output into the streams, then
  the grouped Gemma norm, in one launch (stock: vLLM's ``combine``, then the norm inside ``mix``).
* **mix** (op ``hc_mix`` on the bf16 weights, or ``hc_mix_fp8`` on fp8 copies, which takes precedence): the
  down GEMM merged with the injection logits, and the gated mean block input (fused for 1..16 rows; stock:
  vLLM's ``GatedResidual.mix``).

Per op the counters record each module and each call (``fused``, or ``fallback:rows>16``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from vllm.models.qwen4_exp.common.hyperconnection import GatedResidual

from .. import report
from ..dispatch import get_table
from . import SUPERSEDED, SUPERSEDED_BY

logger = logging.getLogger("vllm.r9k")

MIX = "hc_mix"  # bf16 weights (variant hc_decode_mix)
MIX_FP8 = "hc_mix_fp8"  # fp8 copies, W8A16 (variant hc_fp8_decode); takes precedence over MIX
COMBINE_NORM = "hc_combine_norm"  # variant hc_combine_norm_fused
OPS = (MIX, MIX_FP8, COMBINE_NORM)
MIX_MAX_M = 16  # the mix ops' fused row range (r9k.kernels.hc_mix.triton_kernel.MAX_M)
_TORCH_OPS: dict[str, Callable] = {}


def mix_op(op: str, fn: Callable, lora_rank: int, hc_count: int, count: bool = True) -> Callable:
    """``fn(xn, *weights) -> (buf, block)`` behind an opaque torch custom op that counts its calls (``count``)."""
    name = f"r9k::{op}_l{lora_rank}_h{hc_count}_{fn.__module__.rsplit('.', 1)[-1]}"
    if name not in _TORCH_OPS:
        @torch.library.custom_op(name, mutates_args=())
        def _op(xn: torch.Tensor, weights: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            if count:
                report.hit(op, "fused" if xn.shape[0] <= MIX_MAX_M else f"fallback:rows>{MIX_MAX_M}")
            return fn(xn, *weights, lora_rank=lora_rank, hc_count=hc_count)

        @_op.register_fake
        def _fake(xn, weights):
            return (xn.new_empty((xn.shape[0], weights[0].shape[0])),
                    xn.new_empty((xn.shape[0], xn.shape[1] // hc_count)))

        _TORCH_OPS[name] = _op
    return _TORCH_OPS[name]


def combine_norm_op(fn: Callable, hc_count: int, eps: float) -> Callable:
    """``hc_combine_norm`` behind a torch custom op (``blk``/``inj`` None: the grouped norm alone)."""
    name = f"r9k::hc_combine_norm_h{hc_count}_{fn.__module__.rsplit('.', 1)[-1]}"
    if name not in _TORCH_OPS:
        @torch.library.custom_op(name, mutates_args=())
        def _op(res: torch.Tensor, blk: Optional[torch.Tensor], inj: Optional[torch.Tensor],
                weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            report.hit(COMBINE_NORM, "fused")
            out, y = fn(res, blk, inj, weight, eps, hc_count)
            return (out.clone() if out is res else out), y

        @_op.register_fake
        def _fake(res, blk, inj, weight):
            return torch.empty_like(res), torch.empty_like(res)

        _TORCH_OPS[name] = _op
    return _TORCH_OPS[name]


@dataclass
class HcOps:
    """What one hyper-connection module runs: None means vLLM's ``GatedResidual`` for that half."""

    layer: str
    mix: Optional[Callable] = None
    mix_name: str = ""
    combine_norm: Optional[Callable] = None

    @property
    def fused(self) -> bool:
        return self.mix is not None or self.combine_norm is not None

    @classmethod
    def choose(cls, layer: str, hc_count: int, lora_rank: int, eps: float) -> "HcOps":
        table = get_table()
        picks = {op: (table.choose(op, layer=layer) if table is not None else None) for op in OPS}
        fused = {op for op, c in picks.items() if c is not None and c.state == "fused"}
        out = cls(layer)
        if not fused:
            return out
        why = ""
        if hc_count != 4:
            why = f"hc_count {hc_count}: the kernels are written for 4 streams"
        elif lora_rank % 32 or not 32 <= lora_rank <= 512:
            why = f"hc_lowrank {lora_rank}: the mix kernels take multiples of 32 in 32..512"
        if why:
            for op in fused:
                report.layer(op, layer, installed=False, reason=why)
            logger.warning("r9k: %s: %s; this module keeps vLLM's GatedResidual", layer, why)
            return out
        mixes = [op for op in (MIX_FP8, MIX) if op in fused]  # the fp8 decode path takes precedence
        assert SUPERSEDED_BY.get(MIX) == MIX_FP8  # the order above is the declared one
        if mixes:
            out.mix_name = mixes[0]
            out.mix = mix_op(mixes[0], picks[mixes[0]].fn, lora_rank, hc_count)
            report.layer(mixes[0], layer, installed=True)
            for other in mixes[1:]:
                report.layer(other, layer, installed=False, reason=SUPERSEDED + mixes[0])
        if COMBINE_NORM in fused:
            out.combine_norm = combine_norm_op(picks[COMBINE_NORM].fn, hc_count, eps)
            report.layer(COMBINE_NORM, layer, installed=True)
            if out.mix is None:  # the mix from the fused norm's xn: the hc_mix op's stock sequence (not counted)
                from ...kernels import ops as op_table

                out.mix_name = "stock"
                out.mix = mix_op(MIX, op_table.get(MIX).stock, lora_rank, hc_count, count=False)
        return out


@dataclass
class Folded:
    """A module's carry for the next module's combine: the module and its block's raw injection logits
    (``inj`` [M, hc]) or vLLM's state ``(hyper_input, normed)``."""

    module: GatedResidual
    inj: Optional[torch.Tensor] = None
    vllm_state: Optional[tuple] = None


def prepare(m, ops: HcOps) -> list:
    """After weight loading, the weights the fused halves read: the merged down+inject matrix and the up weight
    (views: no byte added), or for ``hc_mix_fp8`` their fp8 copies (the memory the registry charges)."""
    merged = merge_down_inject(m)
    up = m.input_mix_weight_up.weight
    if ops.mix_name == MIX_FP8:
        from ...kernels.hc_mix import prepare_hc_fp8

        return list(prepare_hc_fp8(merged, up.data))
    return [merged, up]


def merge_down_inject(m) -> torch.Tensor:
    """One [lora + hc (+ zero rows to a multiple of 16), hc*hidden] matrix for the down GEMM, and the
    module's ``input_mix_weight_down`` / ``block_inject_weight`` re-pointed at views of it (no extra bytes)."""
    down = m.input_mix_weight_down.weight
    inject = getattr(m, "block_inject_weight", None)
    rows = down.shape[0] + (inject.weight.shape[0] if inject is not None else 0)
    merged = torch.zeros((-(-rows // 16) * 16, down.shape[1]), dtype=down.dtype, device=down.device)
    merged[: down.shape[0]].copy_(down.data)
    if inject is not None:
        merged[down.shape[0]: rows].copy_(inject.weight.data)
        inject.weight.data = merged[down.shape[0]: rows]
    m.input_mix_weight_down.weight.data = merged[: down.shape[0]]
    return merged


def injection_logits(state: Folded) -> torch.Tensor:
    """The raw injection logits [M, hc] of ``state.module``'s block: its fused mix's, or the inject GEMM on
    vLLM's normed streams."""
    if state.inj is not None:
        return state.inj
    _, normed = state.vllm_state
    return F.linear(normed, state.module.block_inject_weight.weight)


def fold(state: Folded, res: torch.Tensor, block_output: torch.Tensor) -> torch.Tensor:
    """``state.module``'s combine into the streams ``res``: ``bf16(res + block * 2*sigmoid(inj/hc))`` per stream
    (vLLM's ``GatedResidual.combine`` where the module ran vLLM's mix)."""
    if state.vllm_state is not None:
        return GatedResidual.combine(state.module, block_output, state.vllm_state)
    M, hc = res.shape[0], state.module.hc_count
    g = 2.0 * torch.sigmoid(state.inj.float() / hc)
    out = res.float().view(M, hc, -1) + block_output.float()[:, None, :] * g[:, :, None]
    return out.to(res.dtype).view(M, -1)
