"""The Flash-Next layer schedule and the order inside a hyper-connection module, stated once
(docs/semantics.md 2; the module's halves: 3.2, then 3.1 or 3.3).

Both builds of the architecture run through these three functions: the decode-step benchmark
(:class:`r9k.r9kctl.decode_step.model.DecodeStepModel`: this project's ops on synthetic weights) and the plugin's
vLLM model (``r9k.plugin.models.flash_next``: vLLM's layers, its ``GatedResidual`` as the stock path). Each build
brings its own hyper-connection modules (:class:`HcModule`), token mixers and MoE; what runs when is here:

* :func:`forward`: the embedding broadcast into the ``hc`` streams, the layers, the final module's block input
  (what the LM head reads);
* :func:`decoder_layer`: HC module -> token mixer (GDN or QSA) -> HC module -> MoE;
* :func:`hc_module`: combine + grouped norm (the grouped norm alone when no block output is pending), then the
  mix (down + ``hc_silu``, up + gated mean); the mix's *carry* (the injection logits) travels with the block's
  output to the next module's combine.

Between two modules a block output is *pending*: ``(block output [M, hidden], carry of the module that made
its input)``. No torch import: the tensors and the ops are the callers'.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterable, Optional, Protocol

Pending = tuple  # (block output, carry): what the next module's combine folds in
Layer = Callable[[Any, Optional[Pending]], tuple]  # (streams, pending) -> (streams, pending): see decoder_layer


class HcModule(Protocol):
    """One hyper-connection module, as :func:`hc_module` calls it."""

    def combine_norm(self, res, block_output, carry) -> tuple:
        """Fold ``block_output`` (the previous module's block, with that module's ``carry``) into the streams
        ``res`` [M, hc*hidden] and norm each stream: ``(new streams, xn)``. ``block_output`` None: nothing is
        pending, the grouped norm alone. ``xn`` may be None where the mix norms the streams itself."""

    def input_mix(self, res, xn) -> tuple:
        """From ``xn`` (or ``res``): ``(block input [M, hidden], carry)``; ``carry`` holds what the next module's
        combine needs of this module (the injection logits of its block's output)."""


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
