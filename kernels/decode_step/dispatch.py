"""Choosing each op's implementation once, when the model is built, from a resolved profile.

The model never looks at knobs itself: it asks a *chooser* ``choose(op_name) -> Pick`` once per op at
construction. Two choosers, one rule:

* :func:`plugin_chooser` goes through the vLLM plugin's own dispatch table
  (``r9k.plugin.dispatch.DispatchTable``: ``plan()`` then ``choose(op)``), i.e. the exact path a served
  model takes. It needs the registry (pydantic), so it runs where the registry does.
* :func:`values_chooser` applies the same rule (``KernelOp.select``) as ``DispatchTable.choose`` to a plain
  ``{variant id: value}`` map (a manifest from ``r9kctl resolve --format json``), for the H200 where
  neither pydantic nor vLLM is installed: the op table's ``KernelOp.variant`` names the variant, and the
  fused implementation is used iff the variant's value is in ``KernelOp.fused_values``.

``test_decode_step.py`` checks that the two agree op by op for every shipped profile wherever the plugin
plans an op as "fused" or "stock" (and lists where it does not, e.g. ops whose vLLM adapter the plugin does
not have yet).

Ops the op table does not have (a kernel not written yet) get ``Pick(impl="absent")``; the model then
uses its own plain implementation for that part, the same in every profile, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from r9k.kernels import ops

#: The ops the decode step uses, in model order.
STEP_OPS: tuple[str, ...] = (
    "hc_mix", "hc_mix_fp8", "fp8_block_linear", "gdn_decode", "qk_norm_rope", "qsa_glue",
    "router_gemm", "moe_route", "shared_expert",
)


@dataclass(frozen=True)
class Pick:
    op: str
    variant: Optional[str]  # the variant id whose value decided (None when the op is absent)
    value: Optional[str]
    impl: str  # "fused" | "stock" | "absent"
    fn: Optional[Callable]
    via: str  # "plugin" | "values"

    @property
    def fused(self) -> bool:
        return self.impl == "fused"


Chooser = Callable[[str], Pick]


def _kop(name: str):
    try:
        return ops.get(name)
    except KeyError:
        return None


def values_chooser(values: Mapping[str, Optional[str]]) -> Chooser:
    """A chooser over ``{variant id: value}`` (``None`` = unset), with DispatchTable.choose's rule."""

    def choose(op: str) -> Pick:
        kop = _kop(op)
        if kop is None:
            return Pick(op, None, None, "absent", None, "values")
        value = values.get(kop.variant)
        impl, fn = kop.select(value)
        return Pick(op, kop.variant, value, impl, fn, "values")

    return choose


def manifest_values(manifest: Mapping) -> dict[str, Optional[str]]:
    """``{variant id: value}`` of a manifest written by ``r9kctl resolve --format json``."""
    return {vid: entry.get("value") for vid, entry in manifest.get("values", {}).items()}


def plugin_chooser(rs, strict: bool = False) -> Chooser:
    """A chooser through the plugin's DispatchTable built from a ResolvedSet (plan once, then choose per op).

    ``DispatchTable.choose`` returns None where the plugin keeps the stock path (the value is stock, or
    it plans a fallback); the op's stock implementation is then used.
    """
    from r9k.plugin.dispatch import DispatchTable

    table = DispatchTable(rs, strict=strict)
    table.plan()

    def choose(op: str) -> Pick:
        kop = _kop(op)
        if kop is None:
            return Pick(op, None, None, "absent", None, "plugin")
        vid = table.by_op.get(op, kop.variant)
        value = rs.items[vid].value if vid in rs.items else None
        try:
            c = table.choose(op, layer="decode_step")
        except KeyError:  # no registry variant names this op
            c = None
        if c is None:
            return Pick(op, vid, value, "stock", kop.stock, "plugin")
        return Pick(op, c.variant_id, value, c.impl, c.fn, "plugin")

    choose.table = table  # type: ignore[attr-defined]
    return choose


def describe(picks: Mapping[str, Pick]) -> list[dict]:
    return [{"op": p.op, "variant": p.variant, "value": p.value, "impl": p.impl, "via": p.via}
            for p in picks.values()]
