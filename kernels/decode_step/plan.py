"""Building a decode-step plan (see :mod:`.bench`) from the registry: resolved values per profile, the
non-stock variants with their stock values (for the ablation) and the registry's declared memory costs."""
from __future__ import annotations

import re
from typing import Optional


def profile_entry(reg, rs) -> dict:
    from r9k.registry.memory import cost_if_toggled

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


def build_plan(reg, profile: str, against: Optional[str], requests: list[int], context: int, ablate: bool,
               config: str = "flash-next-tp4", replays: int = 50, ablate_requests: Optional[int] = None,
               sets: Optional[dict] = None) -> tuple[dict, list]:
    """Returns ``(plan, diagnostics)``; diagnostics non-empty means a profile did not resolve."""
    from r9k.registry.resolve import resolve

    profs, diags = {}, []
    for name in [profile] + ([against] if against else []):
        rs = resolve(reg, name, sets=sets or {})
        if not rs.ok:
            diags += rs.diagnostics
            continue
        profs[name] = profile_entry(reg, rs)
    plan = {"schema": "r9k-decode-step-plan/1", "profile": profile, "against": against, "requests": requests,
            "context": context, "config": config, "ablate": ablate,
            "ablate_requests": ablate_requests or requests[0], "replays": replays, "profiles": profs}
    return plan, diags
