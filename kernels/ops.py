"""The op table: every fused op the project ships, with its named implementations.

Each kernel subpackage declares one or more :class:`KernelOp` and calls :func:`register` at import.
An op has a ``stock`` implementation (plain PyTorch, the unfused composition, runs anywhere) and a
``fused`` one (Triton). The dispatch layer (``r9k.plugin.dispatch``) asks :meth:`KernelOp.select` once,
when a model is built, never per call.

This module imports neither torch nor triton, so the plugin's startup path stays cheap.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Callable

# Kernel subpackages whose import registers ops. Listed here (not discovered) so the set is explicit.
OP_MODULES: tuple[str, ...] = (
    "r9k.kernels.fp8_block",
    "r9k.kernels.hc_mix",
    "r9k.kernels.router",
    "r9k.kernels.qsa_glue",
    "r9k.kernels.qk_rope",
    "r9k.kernels.shared_expert",
    "r9k.kernels.gdn_decode",
    "r9k.kernels.hc_norm",
)


@dataclass(frozen=True)
class KernelOp:
    """One fused op.

    name:      the op's name, e.g. ``"fp8_block_linear"``.
    variant:   the registry variant id whose knob selects between the implementations.
    stock:     plain PyTorch reference (the unfused composition, launch for launch).
    fused:     the Triton implementation, same signature.
    fused_values: knob values that select ``fused`` (every other value selects ``stock``).
    """

    name: str
    variant: str
    stock: Callable
    fused: Callable
    fused_values: frozenset[str]  # stated by each op: the values of its own knob that mean "fused"

    def select(self, value: "str | None") -> "tuple[str, Callable]":
        """The one rule every caller (the plugin's dispatch table, the decode-step model) applies:
        ``("fused", fused)`` when the knob's value selects the fused implementation, else ``("stock", stock)``."""
        if value is not None and value in self.fused_values:
            return "fused", self.fused
        return "stock", self.stock


_OPS: dict[str, KernelOp] = {}


def register(op: KernelOp) -> KernelOp:
    """Add an op to the table; registering the same op again (a re-import) is a no-op."""
    prev = _OPS.get(op.name)
    if prev is not None and prev.variant != op.variant:
        raise ValueError(f"kernel op {op.name!r} is already registered for variant {prev.variant!r}")
    _OPS[op.name] = op
    return op


def load_all() -> dict[str, KernelOp]:
    """Import every kernel subpackage (each registers its ops) and return the op table."""
    for mod in OP_MODULES:
        importlib.import_module(mod)
    return dict(_OPS)


def get(name: str) -> KernelOp:
    if name not in _OPS:
        load_all()
    return _OPS[name]


def triton_platform() -> str | None:
    """Where Triton kernels can run in this process: ``"cuda"``, ``"rocm"``, ``"interpret"`` or None.

    ``interpret`` is Triton's CPU interpreter (``TRITON_INTERPRET=1``), used for correctness tests.
    """
    try:
        import torch
    except ImportError:
        return None
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "interpret"
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return None
