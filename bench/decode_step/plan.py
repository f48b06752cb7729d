"""Building a decode-step plan (see :mod:`.bench`) from the registry: resolved values per profile, the
non-stock variants with their stock values (for the ablation) and the registry's declared memory costs."""
from __future__ import annotations

import re
from typing import Optional
from .dispatch import STOCK_KINDS


def profile_entry(reg, rs) -> dict:
    from ...registry.memory import cost_if_toggled

    mem = {}
    for r in rs.items.values():
        v = r.variant
        if v.memory is None or not (v.memory.formula or v.memory.bytes_per_gpu):
            continue
        c = cost_if_toggled(reg, rs, v.id)
        m = re.search(r"x\s*([\d,]+)\s*modules", v.memory.basis or "")
        modules = int(m.group(1).replace(",", "")) if m else None
        if modules is None and "hc_" in (v.memory.formula or ""):  # a formula over the model's hc modules
            modules = reg.models[rs.model].dims.get("hc_modules") if rs.model in reg.models else None
        mem[v.id] = {"bytes": c.bytes if c else v.memory.for_tp(rs.tp), "basis": v.memory.basis,
                     "modules": modules, "knob": v.knob}
    return {
        "hash": rs.hash,
        "values": {vid: r.value for vid, r in sorted(rs.items.items())},
        "non_stock": [{"id": r.variant.id, "knob": r.variant.knob, "value": r.value, "stock": r.variant.stock}
                      for r in sorted(rs.non_stock(), key=lambda r: r.variant.id) if r.variant.stock is not None],
        "memory": mem,
    }


def baseline(label: str) -> tuple[str, str, dict]:
    """``(profile, stock kind, knob overrides)`` of a baseline label: ``P`` or ``P@vllm`` (stock paths run vLLM's
    own kernels), ``P@plain`` (the op table's plain compositions); ``vllm`` alone is ``stock@vllm``;
    ``P+KNOB=VALUE`` (repeatable) the profile with knobs overridden (e.g. ``tp4-default+R9K_PDL=1``)."""
    if label == "vllm":
        return "stock", "vllm", {}
    label, *overrides = label.split("+")
    sets = {}
    for o in overrides:
        knob, eq, value = o.partition("=")
        if not eq or not knob:
            raise ValueError(f"baseline override {o!r}: expected KNOB=VALUE")
        sets[knob] = value
    name, _, kind = label.partition("@")
    kind = kind or "vllm"
    if kind not in STOCK_KINDS:
        raise ValueError(f"baseline {label!r}: the stock kind after '@' must be one of {', '.join(STOCK_KINDS)}")
    return name, kind, sets


def build_plan(reg, profile: str, against, requests: list[int], context: int, ablate: bool,
               config: str = "flash-next-tp4", replays: int = 50, ablate_requests: Optional[int] = None,
               sets: Optional[dict] = None) -> tuple[dict, list]:
    """Returns ``(plan, diagnostics)``; diagnostics non-empty means a profile did not resolve. ``against``: a
    baseline label, a comma-separated list of them, or a list (see :func:`baseline`)."""
    from ...registry.resolve import resolve

    if isinstance(against, str):
        against = [a.strip() for a in against.split(",") if a.strip()]
    against = list(against or [])
    profs, diags = {}, []
    for label in [profile] + against:
        name, kind, extra = baseline(label) if label != profile else (profile, "vllm", {})
        rs = resolve(reg, name, sets={**(sets or {}), **extra})
        if not rs.ok:
            diags += rs.diagnostics
            continue
        profs[label] = dict(profile_entry(reg, rs), profile=name, stock=kind)
    plan = {"schema": "r9k-decode-step-plan/2", "profile": profile, "against": against, "requests": requests,
            "context": context, "config": config, "ablate": ablate,
            "ablate_requests": ablate_requests or requests[0], "replays": replays, "profiles": profs}
    return plan, diags
