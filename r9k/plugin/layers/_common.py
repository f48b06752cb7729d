"""What every adapter in :mod:`r9k.plugin.layers` shares.

* :func:`choose`: the dispatch table's choice for one layer (None: vLLM's own path).
* :func:`keep`: a layer that keeps vLLM's path, recorded with its reason (``report.layer(...,
  installed=False)``) and logged once per (op, reason).
* :func:`eligible_choice`: both in one step: the choice, unless the layer is not eligible for it;
  :func:`install` then hooks a module that keeps its vLLM class (state, op, :func:`swap_class`, counter).
* :func:`opaque`: a torch custom op ``torch.ops.r9k.<name>`` defined once per process, so that
  torch.compile keeps the kernel as one opaque call; the call counter runs inside it (at execution
  time, not at trace time).
* :func:`swap_class`: gives one vLLM module instance a subclass that overrides one method, the way
  a model's adapter hooks a plain ``nn.Module`` that vLLM offers no extension point for (the layer's
  state and parameters are untouched; the subclass is made once per vLLM class).
* per-layer Python state for the custom ops (a string key travels through the graph; tensors that
  are not parameters, e.g. converted weights, are looked up here).

An out-of-tree model (e.g. a future Flash-Next model class) uses the same functions: it asks
:func:`choose` for its layer, records eligibility with :func:`keep` / ``report.layer``, and calls
the same ``torch.ops.r9k.*`` ops the adapters define.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from .. import report
from ..dispatch import get_table
from ...registry.availability import Decision

logger = logging.getLogger("vllm.r9k")

_LOGGED: set[tuple[str, str]] = set()
_OPS: dict[str, object] = {}
_SUBCLASSES: dict[tuple[type, type], type] = {}
#: per-layer state of the custom ops: key (the layer's prefix and op) -> object
STATE: dict[str, object] = {}


def choose(op: str, layer: str) -> Optional[Decision]:
    """The implementation of ``op`` for this layer (once per layer, at construction), or None."""
    table = get_table()
    if table is None:
        return None
    return table.choose(op, layer=layer)


def keep(op: str, layer: str, reason: str) -> None:
    """This layer keeps vLLM's own path for ``op``: recorded and logged (once per reason)."""
    report.layer(op, layer, False, reason)
    keep_logged(op, layer, reason)


def keep_logged(op: str, layer: str, reason: str) -> None:
    """The log line of :func:`keep` (once per op and reason)."""
    if (op, reason) not in _LOGGED:
        _LOGGED.add((op, reason))
        logger.warning("r9k: %s: %s: %s; this layer keeps vLLM's own path", op, layer, reason)


def installed(op: str, layer: str) -> None:
    report.layer(op, layer, True)


def _refused(op: str) -> Optional[str]:
    """The reason the op's plan fell back while layers were being built (a failed self-check), else None."""
    table = get_table()
    vid = table.by_op.get(op) if table is not None else None
    plan = table.plans.get(vid) if vid is not None else None
    reason = getattr(plan, "reason", None) or ""
    return reason if reason.startswith("self-check failed") else None


def eligible_choice(op: str, layer: str, ineligible: Callable[[], str],
                    probe: Optional[Callable[[], tuple]] = None, bound: Optional[Callable] = None) -> Optional[Decision]:
    """The table's choice of ``op`` for this layer, or None: when the table leaves the layer to vLLM, or
    when ``ineligible()`` (asked only after a choice) gives a reason, recorded with :func:`keep`, or when the
    startup self-check (:mod:`r9k.plugin.selfcheck`; ``probe``: the op's arguments at this layer's shapes,
    ``bound``: optional, see there) finds the fused kernel off its stock path."""
    choice = choose(op, layer)
    if choice is None:
        refused = _refused(op)
        if refused:  # the op's plan fell back at an earlier layer (its self-check): this layer is stock too
            keep(op, layer, refused)
        return None
    reason = ineligible()
    if not reason and probe is not None:
        from .. import selfcheck

        reason = selfcheck.verify(choice, layer, probe, bound)
    if reason:
        keep(op, layer, reason)
        return None
    return choice


def install(op: str, layer: str, module, state: object, torch_op: object, mixin: type) -> None:
    """Hook ``module`` (of a vLLM class) for ``op``: its ``state`` under the key ``<layer>:<op>`` that the
    custom op ``torch_op`` is called with, the ``mixin``'s methods (:func:`swap_class`), the counter."""
    key = f"{layer}:{op}"
    STATE[key] = state
    module._r9k_key = key
    module._r9k_op = torch_op
    swap_class(module, mixin)
    installed(op, layer)


#: Rows a call may have for the fused path under Triton's CPU interpreter. The kernels are decode kernels
#: (the original stack ran them for 1..16 rows); the interpreter emulates every program in Python, so a
#: prefill-sized call (vLLM's profiling run has 2048 rows) would take minutes. Such a call runs vLLM's own
#: path and is counted ``fallback:rows>16``. On a GPU the ops take any row count (the router GEMM keeps its
#: own 16-row limit).
INTERPRETER_MAX_ROWS = 16


def max_rows(default: "int | None" = None) -> "int | None":
    """The fused path's row limit in this process (None: no limit)."""
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        return INTERPRETER_MAX_ROWS if default is None else min(default, INTERPRETER_MAX_ROWS)
    return default


def opaque(name: str, schema: str, impl: Callable, fake: Callable, mutates_args=()) -> object:
    """``torch.ops.r9k.<name>``: ``impl`` as a torch custom op with ``schema`` (defined once)."""
    if name in _OPS:
        return _OPS[name]
    import torch

    op = torch.library.custom_op(f"r9k::{name}", impl, mutates_args=mutates_args, schema=schema)
    op.register_fake(fake)
    _OPS[name] = op
    return op


def swap_class(obj, mixin: type) -> None:
    """Make ``obj`` an instance of ``mixin`` + its current class (a subclass made once per class)."""
    base = type(obj)
    if getattr(base, "_r9k_mixin", None) is mixin:
        return
    key = (mixin, base)
    cls = _SUBCLASSES.get(key)
    if cls is None:
        # a plain subclass of ``base`` holding the mixin's methods (a class with ``mixin`` as a second
        # base can have a layout that ``__class__`` assignment refuses)
        body = {k: v for k, v in vars(mixin).items() if not k.startswith("__")}
        body.update(__module__=mixin.__module__, _r9k_mixin=mixin)
        cls = type(f"R9k{base.__name__}", (base,), body)
        _SUBCLASSES[key] = cls
    obj.__class__ = cls
