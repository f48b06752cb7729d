"""The op table: every fused op the project ships, with its stock (plain PyTorch) and fused (Triton) forms.

Each kernel subpackage registers its :class:`KernelOp` at import; :func:`load_all` imports every subpackage of
``kernels/`` not starting with ``_`` (no central list, and a dynamic import that gate hashes do not follow, so a
new kernel changes no other gate). The dispatch layer asks :meth:`KernelOp.select` once, when a model is built.
This module imports neither torch nor triton, so the plugin's startup stays cheap."""
from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class KernelOp:
    """One fused op: its ``name``, the registry ``variant`` whose knob selects the implementation, the ``stock``
    and ``fused`` implementations and the knob's ``fused_values`` that select ``fused``."""

    name: str
    variant: str
    stock: Callable
    fused: Callable
    fused_values: frozenset[str]  # stated by each op: the values of its own knob that mean "fused"

    def select(self, value: "str | None") -> "tuple[str, Callable]":
        """``("fused", fused)`` when the knob's value selects the fused implementation, else ``("stock",
        stock)``: the one rule of every caller."""
        if value is not None and value in self.fused_values:
            return "fused", self.fused
        return "stock", self.stock


_OPS: dict[str, KernelOp] = {}


def check_signatures(op: KernelOp) -> None:
    """Raise ``TypeError`` unless every call of ``op.stock`` is a call of ``op.fused``: the stock's
    parameters (name, kind, default) come first in the fused one, in order, and its extra ones have defaults."""
    try:
        stock, fused = inspect.signature(op.stock), inspect.signature(op.fused)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return
    s, f = list(stock.parameters.values()), list(fused.parameters.values())

    def shape(p: inspect.Parameter):
        return p.name, p.kind, p.default

    for i, p in enumerate(s):
        if i >= len(f) or shape(f[i]) != shape(p):
            got = f"{f[i].name} ({f[i].kind.description}, default {f[i].default!r})" if i < len(f) else "nothing"
            raise TypeError(f"kernel op {op.name!r}: the fused {op.fused.__qualname__}{fused} does not take the "
                            f"stock {op.stock.__qualname__}{stock}'s calls: parameter {i + 1} is {got}, the stock's is "
                            f"{p.name} ({p.kind.description}, default {p.default!r})")
    extra = [p.name for p in f[len(s):] if p.default is inspect.Parameter.empty
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if extra:
        raise TypeError(f"kernel op {op.name!r}: the fused {op.fused.__qualname__} needs {', '.join(extra)}, "
                        f"which the stock {op.stock.__qualname__} does not take (give them defaults)")


def register(op: KernelOp) -> KernelOp:
    """Add an op after :func:`check_signatures`; registering the same op again (a re-import) is a no-op."""
    prev = _OPS.get(op.name)
    if prev is not None and prev.variant != op.variant:
        raise ValueError(f"kernel op {op.name!r} is already registered for variant {prev.variant!r}")
    check_signatures(op)
    _OPS[op.name] = op
    return op


def discover() -> tuple[str, ...]:
    """The kernel subpackages' module names: every package in ``kernels/`` not starting with ``_``."""
    here = importlib.import_module(__package__)
    return tuple(sorted(f"{__package__}.{m.name}" for m in pkgutil.iter_modules(here.__path__)
                        if m.ispkg and not m.name.startswith("_")))


def load_all() -> dict[str, KernelOp]:
    for mod in discover():
        importlib.import_module(mod)
    return dict(_OPS)


def get(name: str) -> KernelOp:
    if name not in _OPS:
        load_all()
    return _OPS[name]


def triton_platform() -> str | None:
    """Where Triton kernels can run here: ``"cuda"``, ``"rocm"``, ``"interpret"`` (the CPU interpreter,
    ``TRITON_INTERPRET=1``) or None."""
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return None
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "interpret"
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return None
