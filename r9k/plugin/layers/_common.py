"""What every adapter in :mod:`r9k.plugin.layers` (and every out-of-tree model of :mod:`r9k.plugin.models`) shares.

* :func:`choose` / :func:`eligible_choice`: the dispatch table's choice for one layer (None: vLLM's path),
  unless the layer is ineligible or fails its self-check; :func:`keep` records and logs why a layer keeps vLLM's.
* :func:`install`: hooks a module that keeps its vLLM class (:func:`swap_class`: a subclass overriding one
  method, for a plain ``nn.Module`` vLLM offers no extension point for), its per-layer :data:`STATE` under a
  string key that travels through the graph.
* :func:`opaque`: a torch custom op ``torch.ops.r9k.<name>``, so that torch.compile keeps the kernel one opaque
  call and the call counter runs at execution time.
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
    """The table's choice of ``op`` for this layer, or None: the table leaves it to vLLM, ``ineligible()``
    (asked only after a choice) gives a reason, or the self-check (:mod:`r9k.plugin.selfcheck`; ``probe``,
    ``bound``: see there) fails."""
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


#: Rows a call may have for the fused path under Triton's CPU interpreter: a prefill-sized call (vLLM's profiling
#: run has 2048 rows) would take minutes there, so it runs vLLM's path (``fallback:rows>16``). No limit on a GPU.
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
        # a plain subclass holding the mixin's methods (``mixin`` as a second base can give a layout that
        # ``__class__`` assignment refuses)
        body = {k: v for k, v in vars(mixin).items() if not k.startswith("__")}
        body.update(__module__=mixin.__module__, _r9k_mixin=mixin)
        cls = type(f"R9k{base.__name__}", (base,), body)
        _SUBCLASSES[key] = cls
    obj.__class__ = cls
