"""The memory budget of a resolved profile: KV-cache capacity and what each variant costs of it.

capacity (tokens) = (GPU memory x utilisation - weights - overhead - sum of the variants' costs)
                    / KV bytes per token

with the model's numbers from ``registry/models.toml`` and each variant's ``memory.formula`` evaluated at the
resolved value. A fixed KV budget (the ``KVMEM`` knob; ``VLLM_CPU_KVCACHE_SPACE`` on the CPU) pins the
capacity; the costs then eat the headroom, and a budget that does not fit is an error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

from .formula import Formula, FormulaError, parsed  # noqa: F401  (FormulaError: for callers)
from .loader import Registry
from .resolve import ResolvedSet

GIB = 1 << 30
UTIL_KNOB = "UTIL"
KVMEM_KNOB = "KVMEM"
UTIL_FLAG = "--gpu-memory-utilization"


def vllm_default_utilization() -> Optional[float]:
    """vLLM's own ``--gpu-memory-utilization`` default from the interface description; None without one."""
    from .vllm_interface import target

    iface, _ = target()
    fl = iface.flag(UTIL_FLAG) if iface is not None else None
    return float(fl.default) if fl is not None and fl.default is not None else None


class BudgetError(ValueError):
    """A value the budget cannot be computed with (not finite, or absurdly large); names the knob."""

    def __init__(self, knob: str, value: object, reason: str):
        self.knob, self.value = knob, value
        super().__init__(f"{knob}={value}: {reason}")


MAX_GIB = 1 << 20  # a GPU with more than a PiB of memory is a typo


def _gib(knob: str, raw: object) -> float:
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise BudgetError(knob, raw, "not a number") from None
    if not math.isfinite(x) or abs(x) > MAX_GIB:
        raise BudgetError(knob, raw, f"not a usable size in GiB (must be finite and at most {MAX_GIB})")
    return x


@dataclass
class VariantCost:
    variant: str
    knob: str
    bytes: int
    tokens: int  # KV tokens this variant costs (negative: frees)


@dataclass
class Budget:
    model: str
    tp: int
    memory_bytes: int
    utilization: float
    weights: int
    overhead: int
    kv_bytes_per_token: int
    costs: list[VariantCost] = field(default_factory=list)
    fixed_kv_bytes: Optional[int] = None
    kv_pool_separate: bool = False  # the KV cache is its own allocation (vLLM's CPU backend: VLLM_CPU_KVCACHE_SPACE)
    hybrid: Optional["HybridLayout"] = None  # a hybrid model's page arithmetic (kv_tokens follows vLLM's)

    @property
    def variant_bytes(self) -> int:
        return sum(c.bytes for c in self.costs)

    @property
    def kv_bytes(self) -> int:
        if self.fixed_kv_bytes is not None:
            return self.fixed_kv_bytes
        return int(self.memory_bytes * self.utilization) - self.weights - self.overhead - self.variant_bytes

    @property
    def headroom(self) -> int:
        """Bytes left under the utilisation cap after weights, overhead, variants and the KV cache."""
        return int(self.memory_bytes * self.utilization) - self.weights - self.overhead - self.variant_bytes \
            - (0 if self.kv_pool_separate else self.kv_bytes)

    @property
    def kv_tokens(self) -> int:
        if self.hybrid is not None:
            return self.hybrid.tokens(self.kv_bytes)
        return max(0, self.kv_bytes // self.kv_bytes_per_token)

    def to_dict(self) -> dict:
        return {
            "model": self.model, "tp": self.tp, "memory_bytes": self.memory_bytes, "utilization": self.utilization,
            "weights_bytes": self.weights, "overhead_bytes": self.overhead, "variant_bytes": self.variant_bytes,
            "kv_bytes": self.kv_bytes, "kv_bytes_per_token": self.kv_bytes_per_token, "kv_tokens": self.kv_tokens,
            "fixed_kv_bytes": self.fixed_kv_bytes, "headroom_bytes": self.headroom,
            "costs": [c.__dict__ for c in self.costs],
            **({"kv_hybrid": self.hybrid.__dict__} if self.hybrid is not None else {}),
        }


@dataclass
class HybridLayout:
    """vLLM 0.32's KV-cache arithmetic for a model of attention and recurrent-state layers, on one rank:

    * the attention block grows to hold a state page, ``block = align x ceil(state / (align x attn))``
      (``_align_hybrid_block_size``), and every layer's page is ``block x attn``;
    * layers are grouped by type into groups of equal size: the smaller type's count, or the larger one's when
      under 1.5 times the smaller (``_get_kv_cache_groups_uniform_page_size``); the pool is
      ``kv_bytes // (page x group_size)`` blocks shared by every group;
    * a request of ``max_model_len`` tokens takes ``ceil(max_model_len / block)`` blocks of each attention group
      and ``state_blocks`` of each state group; the capacity is ``int(blocks / per_request x max_model_len)``."""

    attn_bytes_per_token: int  # one attention layer's, this rank
    state_bytes: int  # one state layer's state a sequence, this rank
    attention_layers: int
    state_layers: int
    block_alignment: int
    state_blocks: int  # a request's blocks of each state group
    max_model_len: int

    @property
    def block_size(self) -> int:
        a = self.block_alignment
        return a * -(-self.state_bytes // (a * self.attn_bytes_per_token))

    @property
    def page_bytes(self) -> int:
        return self.block_size * self.attn_bytes_per_token

    @property
    def group_size(self) -> int:
        lo, hi = sorted((self.attention_layers, self.state_layers))
        return hi if hi < lo * 1.5 else lo

    @property
    def blocks_per_request(self) -> int:
        g = self.group_size
        attn_groups, state_groups = -(-self.attention_layers // g), -(-self.state_layers // g)
        return attn_groups * -(-self.max_model_len // self.block_size) + state_groups * self.state_blocks

    @property
    def bytes_per_request(self) -> int:
        """The pool's bytes one request of max_model_len tokens takes (every group, every layer of a group)."""
        return self.blocks_per_request * self.page_bytes * self.group_size

    def blocks(self, kv_bytes: int) -> int:
        return max(0, kv_bytes) // (self.page_bytes * self.group_size)

    def tokens(self, kv_bytes: int) -> int:
        return int(self.blocks(kv_bytes) / self.blocks_per_request * self.max_model_len)


def hybrid_layout(m, tp: int, serve_args: Optional[list] = None) -> Optional[HybridLayout]:
    """The page arithmetic of a hybrid model at a TP size with the profile's vLLM arguments
    (``--max-model-len``; ``--no-enable-prefix-caching``: one state block a request); None without ``kv_hybrid``."""
    h = m.kv_hybrid
    if h is None:
        return None
    from .vllm_interface import serve_options

    key = f"tp{tp}"
    max_len, state_blocks = h.max_model_len, h.state_blocks_per_request
    for _, opt, val in serve_options(list(serve_args or [])):
        if opt == "--max-model-len" and val is not None:
            try:
                max_len = int(val)
            except ValueError:
                raise BudgetError("--max-model-len", val, "not a whole number of tokens") from None
            if max_len < 1:
                raise BudgetError("--max-model-len", val, "must be at least 1")
        elif opt == "--no-enable-prefix-caching":
            state_blocks = 1
        elif opt == "--enable-prefix-caching":
            state_blocks = h.state_blocks_per_request
    return HybridLayout(attn_bytes_per_token=m.kv_bytes_per_token[key] // h.attention_layers,
                        state_bytes=h.state_bytes[key], attention_layers=h.attention_layers,
                        state_layers=h.state_layers, block_alignment=h.block_alignment,
                        state_blocks=state_blocks, max_model_len=max_len)


def budget(reg: Registry, rs: ResolvedSet, errors: Optional[list] = None) -> Optional[Budget]:
    """The budget of a resolved set, or None when the profile names no model/hardware, the model has no numbers
    at this TP size, or a value makes it uncomputable (the :class:`BudgetError` appended to ``errors``)."""
    if not rs.model or rs.model not in reg.models or not rs.hardware:
        return None
    values = {r.variant.knob: r.value for r in rs.items.values()}
    fixed_gib = None
    try:
        if (rs.platform or "") == "cpu" and rs.extra_env.get("VLLM_CPU_KVCACHE_SPACE"):
            fixed_gib = _gib("VLLM_CPU_KVCACHE_SPACE", rs.extra_env["VLLM_CPU_KVCACHE_SPACE"])  # the CPU KV space
        b = budget_of(reg, rs.model, rs.tp, rs.hardware["memory_gib_per_gpu"], values,
                      rs.gpu_memory_utilization or None, fixed_gib, active={r.variant.id for r in rs.active()},
                      serve_args=rs.serve_args)
    except BudgetError as exc:
        if errors is not None:
            errors.append(exc)
        return None
    if b is not None and fixed_gib is not None and not values.get(KVMEM_KNOB):
        b.kv_pool_separate = True
    return b


def budget_of(reg: Registry, model: str, tp: int, memory_gib: float, values: Mapping[str, Optional[str]],
              utilization: Optional[float] = None, fixed_kv_gib: Optional[float] = None,
              active: Optional[set] = None, serve_args: Optional[list] = None) -> Optional[Budget]:
    """The budget of a model at a TP size on GPUs of ``memory_gib``, with the knobs at ``values``; ``active``:
    the variant ids that are on (fixed-byte costs count only then); ``serve_args``: the profile's vLLM arguments."""
    if model not in reg.models:
        return None
    m = reg.models[model]
    key = f"tp{tp}"
    if not m.supports_tp(tp):
        return None
    # what vLLM runs at: the knob's value where the launch passes it (off its stock), else the profile's own
    # serve_args value (a knob at stock passes nothing), else vLLM's own default
    util_v = next((v for v in reg.variants.values() if v.knob == UTIL_KNOB), None)
    uv = values.get(UTIL_KNOB)
    from .vllm_interface import serve_options

    passed = next((val for _, opt, val in serve_options(list(serve_args or [])) if opt == UTIL_FLAG), None)
    if uv and (util_v is None or uv != util_v.stock):
        util = _gib(UTIL_KNOB, uv)
    elif passed and not utilization:
        util = _gib(f"serve_args {UTIL_FLAG}", passed)
    else:
        util = utilization or vllm_default_utilization() or _gib(UTIL_KNOB, uv or (util_v.stock if util_v else 1.0))
    fixed = int(fixed_kv_gib * GIB) if fixed_kv_gib else None
    kv = values.get(KVMEM_KNOB)
    if kv:
        fixed = int(_gib(KVMEM_KNOB, kv) * GIB)
    bpt = m.kv_bytes_per_token[key]
    if bpt <= 0:
        raise BudgetError(f"kv_bytes_per_token.{key}", bpt, f"model {m.name}: must be a positive number of bytes")
    memory_gib = _gib("hardware.memory_gib_per_gpu", memory_gib)
    hybrid = hybrid_layout(m, tp, serve_args)
    if hybrid is not None:  # a token's share of a request's pages: what a variant's bytes cost in tokens
        bpt = max(1, round(hybrid.bytes_per_request / hybrid.max_model_len))
    b = Budget(model=m.name, tp=tp, memory_bytes=int(memory_gib * GIB), utilization=util,
               weights=m.weight_bytes_per_gpu[key], overhead=m.overhead_bytes_per_gpu.get(key, 0),
               kv_bytes_per_token=bpt, fixed_kv_bytes=fixed, hybrid=hybrid)
    # a model without dims (the tiny CPU models) has no formula costs: only its weights, overhead and KV
    with_dims = bool(m.dims or m.derived)
    try:
        env = Formula.env(m, tp, values, {v.knob: v for v in reg.variants.values()}) if with_dims else {}
    except (FormulaError, TypeError, ZeroDivisionError, OverflowError, ValueError) as exc:
        raise BudgetError(f"{m.name}.derived", None, str(exc)) from None
    for v in reg.variants.values():
        mem = v.memory
        if mem is None or not v.applies_to(model):
            continue
        if mem.formula and not with_dims:
            cost = 0
        elif mem.formula:
            try:
                x = parsed(mem.formula, f"{v.id}.memory.formula").bytes(env, values.get(v.knob))
                if not math.isfinite(x):
                    raise OverflowError("not finite")
                cost = int(round(x))
            except (FormulaError, TypeError, ZeroDivisionError, OverflowError, ValueError) as exc:
                raise BudgetError(v.knob, values.get(v.knob), f"its memory formula cannot be computed ({exc})") \
                    from None
        elif mem.bytes_per_gpu and active is not None and v.id in active:
            cost = mem.for_tp(tp)
        else:
            cost = 0
        if cost:
            b.costs.append(VariantCost(v.id, v.knob, cost, _tokens(cost, bpt)))
    return b


def cost_if_toggled(reg: Registry, rs: ResolvedSet, variant_id: str) -> Optional[VariantCost]:
    """What turning a variant on (or off, if on) changes of this profile's budget, in bytes and KV tokens."""
    if not rs.model or rs.model not in reg.models or not rs.hardware:
        return None
    v = reg.variants[variant_id]
    if v.memory is None or not (v.memory.formula or v.memory.bytes_per_gpu):
        return None
    here = budget(reg, rs)
    if here is None:
        return None
    values = {r.variant.knob: r.value for r in rs.items.values()}
    active = {r.variant.id for r in rs.active()}
    other = dict(values)
    on = variant_id in active
    other[v.knob] = v.stock if on else _on_value(v)
    try:
        there = budget_of(reg, rs.model, rs.tp, rs.hardware["memory_gib_per_gpu"], other, rs.gpu_memory_utilization,
                          None, (active - {variant_id}) if on else (active | {variant_id}), serve_args=rs.serve_args)
    except BudgetError:
        return None
    if there is None:
        return None
    on_b, off_b = (here, there) if on else (there, here)
    cost = on_b.variant_bytes - off_b.variant_bytes
    return VariantCost(v.id, v.knob, cost, _tokens(cost, here.kv_bytes_per_token))


def _on_value(v) -> Optional[str]:
    """The value a variant is 'on' at: its registry default where not stock, else its first non-stock choice."""
    default = next((x for x in v.defaults.values() if x != v.stock), None)
    if default is not None:
        return default
    return "1" if v.type == "bool" else next((c for c in v.choices or [] if c != v.stock), v.stock)


def _tokens(nbytes: int, bpt: int) -> int:
    return int(round(nbytes / bpt)) if bpt > 0 else 0


def fmt_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{int(n)} B"
