"""The Flash-Next layer schedule and the order inside a hyper-connection module, stated once (docs/semantics.md
2; the module's halves: 3.2, then 3.1 or 3.3), for both builds: the decode-step benchmark
(:class:`r9k.r9kctl.decode_step.model.DecodeStepModel`) and the plugin's vLLM model (``r9k.plugin.models.flash_next``).

Between two modules a block output is *pending*: ``(block output [M, hidden], carry of the module that made its
input)``; the carry (the injection logits) travels to the next module's combine. No torch import.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterable, Optional, Protocol

Pending = tuple  # (block output, carry): what the next module's combine folds in
Layer = Callable[[Any, Optional[Pending]], tuple]  # (streams, pending) -> (streams, pending): see decoder_layer


class HcModule(Protocol):
    """One hyper-connection module, as :func:`hc_module` calls it."""

    def combine_norm(self, res, block_output, carry) -> tuple:
        """Fold ``block_output`` (None: nothing pending) into the streams ``res`` [M, hc*hidden] and norm each:
        ``(new streams, xn)``; ``xn`` may be None where the mix norms the streams itself."""

    def input_mix(self, res, xn) -> tuple:
        """From ``xn`` (or ``res``): ``(block input [M, hidden], carry for the next module's combine)``."""


def hc_module(m: HcModule, res, pending: Optional[Pending] = None) -> tuple:
    """One hyper-connection module: ``(new streams, block input, carry)``."""
    block_output, carry = pending if pending is not None else (None, None)
    res, xn = m.combine_norm(res, block_output, carry)
    block_input, carry = m.input_mix(res, xn)
    return res, block_input, carry


def decoder_layer(res, pending: Optional[Pending], pre_mixer: HcModule, token_mixer: Callable,
                  pre_moe: HcModule, moe: Callable) -> tuple:
    """One decoder layer: ``(new streams, the MoE's pending output)``; no norms of its own (the modules norm)."""
    res, x, carry = hc_module(pre_mixer, res, pending)
    res, x, carry = hc_module(pre_moe, res, (token_mixer(x), carry))
    return res, (moe(x), carry)


def forward(x, hc_count: int, layers: Iterable[Layer], final: HcModule,
            part: Callable[[str], ContextManager] = lambda name: contextlib.nullcontext()):
    """The embedding ``x`` [M, hidden] through ``layers`` (each calls :func:`decoder_layer` with its own
    modules) and the ``final`` module: its block input [M, hidden]. ``part``: a scope for the broadcast."""
    with part("embed_streams"):
        res = x.repeat(1, hc_count)  # the embedding broadcast into every stream
    pending = None
    for layer in layers:
        res, pending = layer(res, pending)
    return hc_module(final, res, pending)[1]
