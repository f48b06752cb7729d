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

**Stock is what stock vLLM runs.** Where a knob selects the stock path of an op whose stock vLLM runs as
its own Triton launches (:data:`VLLM_STOCK`: the GDN core, one recurrent launch + one gated-norm launch; the
hyper-connection combine + grouped norm, one launch), the chooser's ``stock`` argument decides what runs:
``"vllm"`` (default) vLLM's own kernels, loaded from its sources (:mod:`r9k.kernels._triton.vllm_peer`);
``"plain"`` the op table's plain composition (the measuring stick of the first H200 runs, kept to show what
the correction changes). ``"vllm"`` where vLLM's sources are not on the machine raises
:class:`~r9k.kernels._triton.vllm_peer.PeerUnavailable` at construction: a stock is never silently replaced.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from ...kernels import ops
from ...plugin.dispatch import DispatchTable

#: The ops the decode step uses, in model order.
STEP_OPS: tuple[str, ...] = (
    "hc_combine_norm", "hc_mix", "hc_mix_fp8", "fp8_block_linear", "gdn_decode", "qk_norm_rope", "qsa_glue",
    "router_gemm", "moe_route", "shared_expert",
)

#: Ops whose stock path is vLLM's own Triton launches: op -> the vllm_peer function with the op's signature.
VLLM_STOCK = {"gdn_decode": "gdn_core", "hc_combine_norm": "hc_combine_norm"}

STOCK_KINDS = ("vllm", "plain")


def stock_fn(op: str, kop, stock: str = "vllm") -> "tuple[str, Callable]":
    """``(impl label, fn)`` of op's stock path: ``("stock:vllm", vLLM's kernels)`` for the ops of
    :data:`VLLM_STOCK` when ``stock == "vllm"``, else ``("stock", the op table's stock)``."""
    if stock not in STOCK_KINDS:
        raise ValueError(f"stock must be one of {STOCK_KINDS}, not {stock!r}")
    if stock == "vllm" and op in VLLM_STOCK:
        from ...kernels._triton import vllm_peer

        ok, why = vllm_peer.available()
        if not ok:
            raise vllm_peer.PeerUnavailable(f"stock {op}: {why}")
        return "stock:vllm", getattr(vllm_peer, VLLM_STOCK[op])
    return "stock", kop.stock


@dataclass(frozen=True)
class Pick:
    op: str
    variant: Optional[str]  # the variant id whose value decided
    value: Optional[str]
    impl: str  # "fused" | "stock" (the op table's plain composition) | "stock:vllm" (vLLM's own kernels)
    fn: Callable
    via: str  # "plugin" | "values"

    @property
    def fused(self) -> bool:
        return self.impl == "fused"


Chooser = Callable[[str], Pick]


def values_chooser(values: Mapping[str, Optional[str]], stock: str = "vllm") -> Chooser:
    """A chooser over ``{variant id: value}`` (``None`` = unset), with DispatchTable.choose's rule; stock paths
    as :func:`stock_fn` says."""

    def choose(op: str) -> Pick:
        kop = ops.get(op)
        value = values.get(kop.variant)
        impl, fn = kop.select(value)
        if impl == "stock":
            impl, fn = stock_fn(op, kop, stock)
        return Pick(op, kop.variant, value, impl, fn, "values")

    return choose


def plugin_chooser(rs, strict: bool = False, stock: str = "vllm") -> Chooser:
    """A chooser through the plugin's DispatchTable built from a ResolvedSet (plan once, then choose per op).

    ``DispatchTable.choose`` returns None where the plugin keeps the stock path (the value is stock, or
    it plans a fallback); the op's stock implementation is then used.
    """
    table = DispatchTable(rs, strict=strict)
    table.plan()

    def choose(op: str) -> Pick:
        kop = ops.get(op)
        vid = table.by_op.get(op, kop.variant)
        value = rs.items[vid].value if vid in rs.items else None
        try:
            c = table.choose(op, layer="decode_step")
        except KeyError:  # no registry variant names this op
            c = None
        if c is None:
            impl, fn = stock_fn(op, kop, stock)
            return Pick(op, vid, value, impl, fn, "plugin")
        return Pick(op, c.variant_id, value, c.impl, c.fn, "plugin")

    choose.table = table  # type: ignore[attr-defined]
    return choose


def describe(picks: Mapping[str, Pick]) -> list[dict]:
    return [{"op": p.op, "variant": p.variant, "value": p.value, "impl": p.impl, "via": p.via}
            for p in picks.values()]
