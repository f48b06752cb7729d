"""Choosing each op's implementation once, when the model is built: a *chooser* ``choose(op_name) -> Pick``,
through the plugin's ``DispatchTable`` (:func:`plugin_chooser`; needs the registry) or by the same rule over a plain
``{variant id: value}`` map (:func:`values_chooser`; no pydantic or vLLM needed). Stock paths: :func:`stock_fn`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from ...kernels import ops
from ...plugin.dispatch import DispatchTable
from ...registry import manifest

#: The ops the decode step uses, in model order.
STEP_OPS: tuple[str, ...] = (
    "hc_combine_norm", "hc_mix", "hc_mix_fp8", "fp8_block_linear", "gdn_decode", "qk_norm_rope", "qsa_glue",
    "router_gemm", "moe_route", "shared_expert",
)

#: Ops whose stock path runs vLLM's own Triton launches, loaded from its sources: op -> the vllm_peer function with
#: the op's signature.
VLLM_STOCK = {"gdn_decode": "gdn_core", "hc_combine_norm": "hc_combine_norm", "hc_mix": "hc_mix"}

_QSA_PREPARE = ("stand-in: vLLM runs this op, the other QSA glue op and both cache writes as one Triton launch "
                "(qsa_prepare, ops/qsa_prepare.py) over its own cache layout, with the attention's rotary on the "
                "indexer (64 of 128 dims, where the reference ropes 32): another function here, not loaded; "
                "runs the op table's composition")

#: Per op, what stock vLLM 0.32 runs on SM90 and what the benchmark's stock runs: ``(kind, text)``, kind
#: ``"vllm"`` (vLLM's real path ran) or ``"stand-in"`` (vLLM's path is compiled code; the text says what runs).
STOCK_SOURCE: dict[str, tuple[str, str]] = {
    "hc_combine_norm": ("vllm", "vLLM's _hc_combine_norm / _grouped_gemma_rmsnorm (Triton, from its sources)"),
    "router_gemm": ("vllm", "vLLM's path on SM90: bf16 F.linear (cuBLAS; its low-latency CuTe GEMM has no SM90 "
                            "plan for 512x2560)"),
    "hc_mix": ("stand-in", "stand-in: vLLM fuses the down GEMM + SiLU in compiled code (CuTe DSL hc_down_silu, "
                           "1-48 rows); runs vLLM's path above 48 rows: cuBLAS, its _hc_silu_kernel, cuBLAS, its "
                           "_hc_gate_mix"),
    "hc_mix_fp8": ("stand-in", "no vLLM counterpart (the fp8 HC copies are this project's): stock is the bf16 mix "
                               "(hc_mix)"),
    "gdn_decode": ("stand-in", "stand-in: vLLM fuses this in compiled code (torch.ops._C."
                               "fused_gdn_decode_post_conv_mtp); runs vLLM's Triton fallback: "
                               "fused_sigmoid_gating_delta_rule_update + layer_norm_fwd_kernel"),
    "fp8_block_linear": ("stand-in", "stand-in: vLLM fuses this in compiled code (CUTLASS block-scaled fp8 GEMM, "
                                     "cutlass_scaled_mm); runs the op table's quant + Triton GEMM"),
    "qk_norm_rope": ("stand-in", _QSA_PREPARE),
    "qsa_glue": ("stand-in", _QSA_PREPARE),
    "moe_route": ("stand-in", "stand-in: vLLM fuses this in compiled code (topk_softmax); runs the op table's "
                              "composition"),
    "shared_expert": ("stand-in", "stand-in: vLLM fuses the shared expert into its MoE in compiled code (fused MoE "
                                  "with the shared expert); runs the op table's MXFP4 composition"),
}

#: The ops whose stock is vLLM's real path.
REAL_VLLM_OPS = tuple(op for op in STEP_OPS if STOCK_SOURCE[op][0] == "vllm")


def real_ops_values(profile_values: Mapping[str, Optional[str]], stock_values: Mapping[str, Optional[str]]) -> dict:
    """The headline's baseline over real-vLLM ops: the profile's values with every :data:`REAL_VLLM_OPS` op's
    variant at its stock value (only those ops differ from the profile)."""
    vals = dict(profile_values)
    for op in REAL_VLLM_OPS:
        vid = ops.get(op).variant
        vals[vid] = stock_values.get(vid)
    return vals


STOCK_KINDS = ("vllm", "plain")


def stock_fn(op: str, kop, stock: str = "vllm") -> "tuple[str, Callable]":
    """``(impl label, fn)`` of op's stock path: ``("stock:vllm", vLLM's kernels)`` for the ops of
    :data:`VLLM_STOCK` when ``stock == "vllm"`` (``PeerUnavailable`` without vLLM's sources: a stock is never
    silently replaced), else ``("stock", the op table's stock)``."""
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
    """A chooser through the plugin's DispatchTable planned from a ResolvedSet's manifest (or a Manifest as it
    is), as a served process does; where the table keeps the stock path (None), the op's stock runs."""
    rs = rs if isinstance(rs, manifest.Manifest) else manifest.from_resolved(rs)
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
            return Pick(op, vid, value, *stock_fn(op, kop, stock), "plugin")
        return Pick(op, c.variant_id, value, c.state, c.fn, "plugin")

    choose.table = table  # type: ignore[attr-defined]
    return choose


def describe(picks: Mapping[str, Pick], stock: str = "vllm") -> list[dict]:
    """One row per op; ``stock_source``: what its stock is (:data:`STOCK_SOURCE`), for every op (fused or not)."""
    return [{"op": p.op, "variant": p.variant, "value": p.value, "impl": p.impl, "via": p.via,
             "stock_kind": "plain" if stock == "plain" else STOCK_SOURCE[p.op][0],
             "stock_source": "the op table's plain composition" if stock == "plain" else STOCK_SOURCE[p.op][1]}
            for p in picks.values()]
