"""The dispatch table: which implementation each fused op uses in this process.

* :meth:`DispatchTable.plan` (at ``register()``, no kernel import) decides per variant one
  :class:`r9k.registry.manifest.Impl`: ``FUSED`` (this project's, runnable here), ``STOCK`` (vLLM's path),
  ``FALLBACK`` (selected but cannot run here: stock with one warning, a
  :class:`~r9k.plugin.startup.StartupError` in strict mode) or ``ENV`` (only exported for code outside).
* :meth:`DispatchTable.choose` (once per layer at model construction, never per call) hands a layer the
  kernel, importing it then (an import failure falls back the same way); its first call is where the ranks
  agree unless they did when vLLM made its world group.

What is used (:meth:`DispatchTable.in_use`) is logged once per op and written to the status file.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..registry.availability import Decision
from ..registry.manifest import Impl, Manifest
from ..kernels.ops import triton_platform
from ..registry import availability
from .startup import StartupError
from ..kernels import ops

logger = logging.getLogger("vllm.r9k")

#: Triton backend of a process (``triton_platform()``) -> the platform family of the availability rule.
_PROBE_FAMILY = {"interpret": "cpu", "cuda": "cuda", "rocm": "rocm"}


@dataclass
class DispatchTable:
    rs: Manifest
    strict: bool = False
    platform_probe: Callable[[], Optional[str]] = triton_platform
    plans: dict[str, Decision] = field(default_factory=dict)  # variant id -> its decision here
    by_op: dict[str, str] = field(default_factory=dict)  # op name -> variant id
    on_change: Optional[Callable[["DispatchTable"], None]] = None  # e.g. rewrite the status file
    on_first_layer: Optional[Callable[["DispatchTable"], None]] = None  # once, at the first choose(): rank agreement
    _chosen: set[str] = field(default_factory=set)  # the ops a layer got the kernel of
    warnings: list[str] = field(default_factory=list)

    # ----------------------------------------------------------------------------- at register()

    def plan(self) -> dict[str, Decision]:
        """Decide every variant's implementation with :func:`r9k.registry.availability.plan` (the rule of
        ``r9kctl validate``) and whether this process has a Triton backend for the profile's platform.
        Raises StartupError in strict mode when a selected implementation cannot run here."""
        decisions = availability.plan(self.rs)
        family = availability.platform_family(self.rs.platform)
        probed, triton = False, None
        errors: list[str] = []
        for vid, r in sorted(self.rs.items.items()):
            v = r.variant
            p = decisions[vid]
            if v.sets is not None:
                from ..registry.vllm_map import describe

                p.launcher = describe(v.sets)
            if p.op:
                self.by_op[p.op] = vid
            if p.state is Impl.FUSED:
                if not probed:
                    triton, probed = self.platform_probe(), True
                here = _PROBE_FAMILY.get(triton or "")
                if triton is None:
                    p.state, p.reason = Impl.FALLBACK, "no Triton backend in this process (no GPU; TRITON_INTERPRET=1 not set)"
                elif family is not None and here != family:
                    p.state, p.reason = Impl.FALLBACK, (f"the profile is for platform '{self.rs.platform}', this process "
                                                    f"has Triton '{triton}'")
            if p.state is Impl.FALLBACK:
                line = f"{v.knob}={r.value}: {p.reason}; using vLLM's own path ({v.knob}={v.stock})"
                if self.strict:
                    errors.append(f"error[no-implementation]: {line} (strict mode)")
                else:
                    self.warnings.append(line)
            self.plans[vid] = p
        if errors:
            raise StartupError(errors, "r9k: a selected implementation cannot run here; refusing to start vLLM")
        return self.plans

    def installs(self) -> list[Decision]:
        """Variants whose implementation the plugin installs through an extension point."""
        return [p for p in self.plans.values() if p.state is Impl.FUSED]

    # ------------------------------------------------------------------- at model construction

    def choose(self, op: str, layer: str = "") -> Optional[Decision]:
        """The decision for ``op`` at one layer, its kernel in ``fn`` (None: the layer keeps vLLM's path)."""
        if self.on_first_layer is not None:  # the ranks agree before any layer is built (collective)
            first, self.on_first_layer = self.on_first_layer, None
            first(self)
        vid = self.by_op.get(op)
        if vid is None:
            raise KeyError(f"no variant in the registry names op {op!r}")
        plan = self.plans[vid]
        plan.layers += 1
        if plan.state is not Impl.FUSED:
            return None
        if op in self._chosen:
            return plan
        try:
            kop = ops.get(op)
        except Exception as exc:  # noqa: BLE001 - any import problem of the kernel means: not available
            where = _where(exc)
            line = (f"{where}error[kernel-import]: variant {vid} ({plan.knob}={plan.value}), layer {layer or '?'}: "
                    f"kernel op {op!r} does not load: {type(exc).__name__}: {exc}")
            if self.strict:
                raise StartupError([line + " (strict mode)"],
                                   "r9k: a kernel does not load; refusing to start vLLM") from None
            logger.warning("r9k: %s; every layer of this op keeps vLLM's own path", line)
            self.warnings.append(line)
            plan.state, plan.reason = Impl.FALLBACK, f"kernel op does not load: {type(exc).__name__}: {exc}"
            if self.on_change:
                self.on_change(self)
            return None
        plan.used = f"{plan.module}:{op} {Impl.FUSED} (triton {triton_platform()})"
        plan.fn = kop.fused
        self._chosen.add(op)
        logger.info("r9k %s: %s=%s -> %s, first used by %s", self.rs.hash, plan.knob, plan.value, plan.used,
                    layer or "a layer")
        if self.on_change:
            self.on_change(self)
        return plan

    def in_use(self) -> dict[str, str]:
        """variant id -> the implementation this process uses, for every non-stock variant."""
        return {vid: p.describe() for vid, p in sorted(self.plans.items()) if p.state in (Impl.FUSED, Impl.FALLBACK)}


def _where(exc: BaseException) -> str:
    """``file:line: `` of the innermost frame of ``exc`` (where the import failed), or ""."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}: "


_TABLE: Optional[DispatchTable] = None


def get_table() -> Optional[DispatchTable]:
    """The process's table (None when the plugin is inactive here)."""
    return _TABLE


def set_table(table: Optional[DispatchTable]) -> None:
    global _TABLE
    _TABLE = table
