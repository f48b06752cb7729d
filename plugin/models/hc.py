"""The hyper-connection module's fused path: this project's ``hc_mix`` op inside vLLM's ``GatedResidual``.

:class:`HcPath` asks the dispatch table once per module (at construction) for op ``hc_mix``; the stock path is
vLLM's own pure-PyTorch ``GatedResidual.mix``/``combine``. The fused path computes the same thing the
original stack's decode kernels do (kernel-semantics 3.1, 3.2; docs/semantics.md):

* ``xn`` = grouped Gemma RMSNorm of the streams (``kernels/decode_step/plain.hc_group_norm``, the function
  the decode-step benchmark runs too);
* ``hc_mix(xn, down+inject, up)`` -> ``buf`` (silu(down/hc) in the first ``lora`` columns, raw injection
  logits in the next ``hc``) and the block input (sigmoid-gated mean over the streams): 2 launches for
  1..16 rows, the stock sequence above (counted as ``fallback:rows>16``);
* ``combine`` = ``bf16(res + block * 2*sigmoid(inj/hc))`` per stream (``plain.hc_combine``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from r9k.kernels.decode_step import plain

from .. import counters
from ..dispatch import get_table

logger = logging.getLogger("vllm.r9k")

OP = "hc_mix"  # bf16 weights (variant hc_decode_mix, R9K_HC_MIX)
OP_FP8 = "hc_mix_fp8"  # fp8 copies of the weights, W8A16 (variant hc_fp8_decode, R9K_HC_FP8_DECODE); takes precedence
FUSED_MAX_M = 16  # the fused ops' row range (r9k.kernels.hc_mix.triton_kernel.MAX_M); above: their stock sequence
_TORCH_OPS: dict[str, Callable] = {}


def _torch_op(op: str, fn: Callable, lora_rank: int, hc_count: int) -> Callable:
    """The chosen op behind a torch custom op (opaque to torch.compile; the counter runs at execution time).
    ``op(xn, *weights) -> (buf, block)``: weights (down, up) for ``hc_mix``, (down_q, down_s, up_q, up_s) for
    ``hc_mix_fp8``."""
    name = f"r9k::{op}_fused_l{lora_rank}_h{hc_count}"
    if name in _TORCH_OPS:
        return _TORCH_OPS[name]

    @torch.library.custom_op(name, mutates_args=())
    def _op(xn: torch.Tensor, weights: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        counters.hit(op, "fused" if xn.shape[0] <= FUSED_MAX_M else f"fallback:rows>{FUSED_MAX_M}")
        buf, block = fn(xn, *weights, lora_rank=lora_rank, hc_count=hc_count)
        return buf, block

    @_op.register_fake
    def _fake(xn, weights):
        return (xn.new_empty((xn.shape[0], weights[0].shape[0])),
                xn.new_empty((xn.shape[0], xn.shape[1] // hc_count)))

    _TORCH_OPS[name] = _op
    return _op


@dataclass
class HcPath:
    """What one hyper-connection module runs."""

    layer: str
    fused: bool
    op: Optional[Callable] = None
    reason: str = ""
    name: str = OP  # OP or OP_FP8

    @classmethod
    def choose(cls, layer: str, hc_count: int, lora_rank: int, use_combine: bool) -> "HcPath":
        table = get_table()
        picks = {n: (table.choose(n, layer=layer) if table is not None else None) for n in (OP_FP8, OP)}
        fused = [n for n in (OP_FP8, OP) if picks[n] is not None and picks[n].impl == "fused"]
        if not fused:
            return cls(layer, False, reason="stock: vLLM's GatedResidual")
        choice = picks[fused[0]]  # the fp8 decode path takes precedence (kernel-semantics 3.1, 3.3)
        for other in fused[1:]:
            counters.layer(other, layer, installed=False, reason=f"{choice.op} (fp8 copies) takes precedence")
        name = choice.op
        reason = ""
        if hc_count != 4:
            reason = f"hc_count {hc_count}: the fused kernel is written for 4 streams"
        elif lora_rank % 32 or not 16 <= lora_rank <= 512:
            reason = f"hc_lowrank {lora_rank}: the fused kernel takes multiples of 32 in 32..512"
        if reason:
            counters.layer(name, layer, installed=False, reason=reason)
            logger.warning("r9k: %s: %s; this module keeps vLLM's GatedResidual", layer, reason)
            return cls(layer, False, reason=reason, name=name)
        counters.layer(name, layer, installed=True)
        return cls(layer, True, _torch_op(name, choice.fn, lora_rank, hc_count), name=name)

    def count_stock(self) -> None:
        if self.reason and not self.reason.startswith("stock"):
            counters.hit(self.name, "fallback:ineligible")

    def weights(self, m) -> list:
        """The weights the op reads, laid out at load (:func:`prepare`)."""
        return m._hc_weights

    def mix(self, m, hyper_input: torch.Tensor):
        """Fused mix of module ``m`` (a ``FlashNextHyperConnection``): (block input, (res, inj))."""
        M = hyper_input.shape[0]
        xn = plain.hc_group_norm(hyper_input, m.hc_norm.weight, m.hc_count, m.config.rms_norm_eps)
        buf, block = self.op(xn, m._hc_weights)
        L = m.config.hc_lowrank
        return block.view(M, -1), (hyper_input, buf[:, L: L + m.hc_count])


def prepare(m, path: HcPath) -> list:
    """At the end of weight loading: the op's weights. ``hc_mix``: the merged down+inject matrix and the up
    weight (views of the loaded ones: no byte added). ``hc_mix_fp8``: their fp8 copies with per-row scales
    (``prepare_hc_fp8``), the memory the registry charges for R9K_HC_FP8_DECODE."""
    merged = merge_down_inject(m)
    up = m.input_mix_weight_up.weight
    if path.name == OP:
        return [merged, up]
    from r9k.kernels.hc_mix import prepare_hc_fp8

    return list(prepare_hc_fp8(merged, up.data))


def merge_down_inject(m) -> torch.Tensor:
    """One [lora + hc (+ zero rows to a multiple of 16), hc*hidden] matrix for the down GEMM, and the
    module's ``input_mix_weight_down`` / ``block_inject_weight`` re-pointed at views of it (no extra bytes)."""
    down = m.input_mix_weight_down.weight
    inject = getattr(m, "block_inject_weight", None)
    rows = down.shape[0] + (inject.weight.shape[0] if inject is not None else 0)
    padded = -(-rows // 16) * 16
    merged = torch.zeros((padded, down.shape[1]), dtype=down.dtype, device=down.device)
    merged[: down.shape[0]].copy_(down.data)
    if inject is not None:
        merged[down.shape[0]: rows].copy_(inject.weight.data)
        inject.weight.data = merged[down.shape[0]: rows]
    m.input_mix_weight_down.weight.data = merged[: down.shape[0]]
    return merged


def combine(block_output: torch.Tensor, state, hc_count: int) -> torch.Tensor:
    res, inj = state
    return plain.hc_combine(res, block_output, inj, hc_count)
