"""Installing implementations through vLLM's extension points (never by editing vLLM's source).

Supported kinds (the variant -> extension point mapping is the ``implementation.extension_point`` of
each variant in the registry's TOML):

* ``pluggable_layer:<name>``: ``<LayerClass>.register_oot(<adapter>)``, vLLM's out-of-tree layer
  registration. vLLM looks the replacement up when a layer is instantiated, so the registration must
  precede model construction, and must not cost the processes that never build a model (API server,
  engine core) the import of vLLM's MoE layers (~1.3 s). The plugin therefore registers right away
  when vLLM's layer module is already imported, and otherwise when it gets imported: a post-import
  hook on ``sys.meta_path`` (Python's import system; the module is loaded unchanged and the hook runs
  after it has executed). A layer class cannot be instantiated before its module is imported, so the
  registration is always in time.

Each ``<name>`` needs an adapter in :mod:`r9k.plugin.layers`; :data:`LAYERS` lists them with the vLLM
module that defines the layer.
"""
from __future__ import annotations

import importlib
import importlib.abc
import logging
import sys
import threading
from typing import Callable

logger = logging.getLogger("vllm.r9k")

#: vLLM pluggable-layer name -> (module defining it, class name, adapter "module:Class").
LAYERS: dict[str, tuple[str, str, str]] = {
    "gate_linear": ("vllm.model_executor.layers.fused_moe.router.gate_linear", "GateLinear",
                    "r9k.plugin.layers.gate_linear:R9kGateLinear"),
}


class _LoaderProxy(importlib.abc.Loader):
    """Delegates to the module's real loader and runs callbacks once the module has executed."""

    def __init__(self, loader, callbacks: list[Callable]):
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for cb in self._callbacks:
            cb(module)

    def __getattr__(self, name):  # get_source, get_filename, ... for inspect and linecache
        return getattr(self._loader, name)


class PostImportHooks(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a named module is imported (first import only)."""

    def __init__(self):
        self.pending: dict[str, list[Callable]] = {}
        self._lock = threading.Lock()

    def add(self, module: str, callback: Callable) -> None:
        """Run ``callback(module_object)`` now if ``module`` is imported, else after its import."""
        mod = sys.modules.get(module)
        if mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False) is False:
            callback(mod)
            return
        with self._lock:
            self.pending.setdefault(module, []).append(callback)
            if self not in sys.meta_path:
                sys.meta_path.insert(0, self)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        with self._lock:
            callbacks = self.pending.pop(fullname, None)
            if not self.pending and self in sys.meta_path:
                sys.meta_path.remove(self)
        if not callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            spec.loader = _LoaderProxy(spec.loader, callbacks)
        return spec


HOOKS = PostImportHooks()


def _load_obj(ref: str):
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


def register_layer(name: str) -> None:
    """Register this project's adapter for vLLM pluggable layer ``name`` (idempotent)."""
    vllm_module, cls_name, adapter_ref = LAYERS[name]

    def _do(module) -> None:
        from vllm.model_executor.custom_op import op_registry_oot

        base = getattr(module, cls_name)
        adapter = _load_obj(adapter_ref)
        current = op_registry_oot.get(cls_name)
        if current is adapter:
            return
        if current is not None:
            raise RuntimeError(f"r9k: vLLM layer {name} ({cls_name}) already has an out-of-tree replacement "
                               f"{current.__module__}.{current.__qualname__}; refusing to replace it")
        base.register_oot(adapter)
        logger.debug("r9k: registered %s for pluggable layer %s", adapter_ref, name)

    HOOKS.add(vllm_module, _do)


def install(extension_point: str) -> None:
    kind, _, name = extension_point.partition(":")
    if kind == "pluggable_layer" and name in LAYERS:
        register_layer(name)
    else:  # DispatchTable.plan only plans installs for supported extension points
        raise ValueError(f"r9k: cannot install {extension_point!r}")
