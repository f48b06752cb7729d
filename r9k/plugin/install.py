"""Installing implementations through vLLM's extension points (never by editing vLLM's source).

What to install comes from the registry's adapter table (``registry/adapters.toml``, the one the availability
rule counts). Per adapter, ``register_oot`` (``<vLLM class>.register_oot(<adapter class>)``) or ``call``
(``<adapter function>(<vLLM module>)``, a documented hook listed in notes/independence.md). The install runs
when the vLLM module is imported already, else right after its import (a post-import hook on
``sys.meta_path``): always before a layer is built, and never costing a process that builds no model the
import of vLLM's layer modules. A failed install is one located line; the variant falls back to vLLM's path,
or in strict mode the start stops before any weight loads.
"""
from __future__ import annotations

import importlib
import importlib.abc
import logging
import sys
import threading
from typing import Callable
from ..registry.availability import load_adapters

logger = logging.getLogger("vllm.r9k")


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


def layers() -> dict[str, tuple[str, str, str]]:
    """extension point -> (vLLM module, vLLM class, adapter "module:attr"), from the adapter table."""
    return {ep: (a.vllm_module, a.vllm_class, a.adapter) for ep, a in load_adapters().adapters.items()}


class InstallError(RuntimeError):
    pass


def _install_now(adapter, module) -> None:
    """Install ``adapter`` (an availability.Adapter) into the imported vLLM ``module`` (idempotent)."""
    base = getattr(module, adapter.vllm_class, None)
    if base is None:
        raise InstallError(f"vLLM module {adapter.vllm_module} has no class {adapter.vllm_class}")
    try:
        obj = _load_obj(adapter.adapter)
    except Exception as exc:  # noqa: BLE001 - any import failure of the adapter means: not installed
        raise InstallError(f"adapter {adapter.adapter} does not load: {type(exc).__name__}: {exc}") from exc
    if adapter.install == "call":
        obj(module)
        return
    from vllm.model_executor.custom_op import op_registry_oot

    name = adapter.vllm_class
    current = op_registry_oot.get(name)
    if current is obj:
        return
    if current is not None:
        raise InstallError(f"vLLM layer {name} already has an out-of-tree replacement "
                           f"{current.__module__}.{current.__qualname__}; not replacing it")
    base.register_oot(obj)
    logger.debug("r9k: registered %s for %s", adapter.adapter, adapter.extension_point)


def install(plan, on_failure: Callable[[object, str], None]) -> None:
    """Install the adapter of one planned variant, now or when vLLM imports the module it hooks;
    ``on_failure(plan, reason)`` on failure."""
    adapter = plan.adapter
    if adapter is None:  # DispatchTable.plan only plans installs for extension points with an adapter
        on_failure(plan, f"no adapter for {plan.extension_point}")
        return

    def _do(module) -> None:
        try:
            _install_now(adapter, module)
        except Exception as exc:  # noqa: BLE001 - reported as one line by on_failure
            on_failure(plan, str(exc) if isinstance(exc, InstallError) else f"{type(exc).__name__}: {exc}")

    HOOKS.add(adapter.vllm_module, _do)


def install_failed(plan, reason: str) -> None:
    """An adapter that does not install: one line naming variant, extension point and reason; the variant
    keeps vLLM's path, or the start stops in strict mode (before any weight loads)."""
    from . import dispatch, report
    from ..registry.manifest import Impl
    from .startup import StartupError

    line = (f"{plan.knob}={plan.value} (variant {plan.variant_id}): the adapter for {plan.extension_point} "
            f"does not install: {reason}")
    table = dispatch.get_table()
    if table is not None and table.strict:
        raise StartupError([f"error[adapter-install]: {line} (strict mode)"],
                           "r9k: an adapter does not install; refusing to start vLLM")
    plan.state, plan.reason = Impl.FALLBACK, f"adapter does not install: {reason}"
    report.emit(logging.WARNING, f"{report._prefix()} {line}; using vLLM's own path")
    report.write_status(table)
