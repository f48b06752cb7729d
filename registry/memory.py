"""The memory budget of a resolved profile: KV-cache capacity and what each active variant costs of it.

capacity (tokens) = (GPU memory x utilisation - weights - overhead - sum of active variants' costs)
                    / KV bytes per token

with the model's numbers from ``registry/models.toml`` and the variants' ``memory.bytes_per_gpu``.
A fixed KV budget (the ``KVMEM`` launcher knob, vLLM's ``--kv-cache-memory``) pins the capacity; the
costs then eat the headroom instead, and a budget that does not fit is an error.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .loader import Registry
from .resolve import ResolvedSet

GIB = 1 << 30
UTIL_KNOB = "UTIL"
KVMEM_KNOB = "KVMEM"
DEFAULT_UTIL = 0.9  # vLLM's default --gpu-memory-utilization


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
            - self.kv_bytes

    @property
    def kv_tokens(self) -> int:
        return max(0, self.kv_bytes // self.kv_bytes_per_token)

    def to_dict(self) -> dict:
        return {
            "model": self.model, "tp": self.tp, "memory_bytes": self.memory_bytes, "utilization": self.utilization,
            "weights_bytes": self.weights, "overhead_bytes": self.overhead, "variant_bytes": self.variant_bytes,
            "kv_bytes": self.kv_bytes, "kv_bytes_per_token": self.kv_bytes_per_token, "kv_tokens": self.kv_tokens,
            "fixed_kv_bytes": self.fixed_kv_bytes, "headroom_bytes": self.headroom,
            "costs": [c.__dict__ for c in self.costs],
        }


def budget(reg: Registry, rs: ResolvedSet, errors: Optional[list] = None) -> Optional[Budget]:
    """The budget of a resolved set, or None when the profile names no model/hardware or the model has
    no numbers at this TP size (validation reports those separately), or when a value makes it
    uncomputable (a :class:`BudgetError`, appended to ``errors`` when given: validation reports it)."""
    try:
        return _budget(reg, rs)
    except BudgetError as exc:
        if errors is not None:
            errors.append(exc)
        return None


def _budget(reg: Registry, rs: ResolvedSet) -> Optional[Budget]:
    if not rs.model or rs.model not in reg.models or not rs.hardware:
        return None
    m = reg.models[rs.model]
    key = f"tp{rs.tp}"
    if not m.supports_tp(rs.tp):
        return None
    util = DEFAULT_UTIL
    if rs.gpu_memory_utilization:
        util = rs.gpu_memory_utilization
    uv = _value(rs, UTIL_KNOB)
    if uv:
        util = _gib(UTIL_KNOB, uv)
    fixed = None
    kv = _value(rs, KVMEM_KNOB)
    if kv:
        fixed = int(_gib(KVMEM_KNOB, kv) * GIB)
    bpt = m.kv_bytes_per_token[key]
    if bpt <= 0:
        raise BudgetError(f"kv_bytes_per_token.{key}", bpt, f"model {m.name}: must be a positive number of bytes")
    mem = _gib("hardware.memory_gib_per_gpu", rs.hardware["memory_gib_per_gpu"])
    b = Budget(model=m.name, tp=rs.tp, memory_bytes=int(mem * GIB), utilization=util,
               weights=m.weight_bytes_per_gpu[key], overhead=m.overhead_bytes_per_gpu.get(key, 0),
               kv_bytes_per_token=bpt, fixed_kv_bytes=fixed)
    for r in rs.active():
        mem = r.variant.memory
        if mem is None or not mem.bytes_per_gpu:
            continue
        cost = mem.for_tp(rs.tp)
        if cost:
            b.costs.append(VariantCost(r.variant.id, r.variant.knob, cost, _tokens(cost, bpt)))
    return b


def cost_if_toggled(reg: Registry, rs: ResolvedSet, variant_id: str) -> Optional[VariantCost]:
    """What a variant costs at this profile's TP size (whether or not it is on), in bytes and KV tokens."""
    if not rs.model or rs.model not in reg.models:
        return None
    m = reg.models[rs.model]
    v = reg.variants[variant_id]
    if v.memory is None or not v.memory.bytes_per_gpu or f"tp{rs.tp}" not in m.kv_bytes_per_token:
        return None
    cost = v.memory.for_tp(rs.tp)
    return VariantCost(v.id, v.knob, cost, _tokens(cost, m.kv_bytes_per_token[f"tp{rs.tp}"]))


def _tokens(nbytes: int, bpt: int) -> int:
    return int(round(nbytes / bpt)) if bpt > 0 else 0


def _value(rs: ResolvedSet, knob: str) -> Optional[str]:
    try:
        return rs.value(knob)
    except KeyError:
        return None


def fmt_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{sign}{n / size:.2f} {unit}"
    return f"{sign}{int(n)} B"
