"""Model-dependent ranges: a knob's value bounded by the served model's facts (``[model] ranges`` of
registry/models.toml), e.g. the MTP depths its MTP head makes meaningful. The variant declares what vLLM
accepts at all; the model narrows it. One located error per value outside, at the layer that set it."""
from __future__ import annotations

from .consistency import set_by, value_where
from .errors import Diagnostic


def check(reg, rs, report) -> None:
    m = reg.models.get(rs.model) if rs.model else None
    if m is None or not m.ranges:
        return
    for r in rs.items.values():
        rng = m.ranges.get(r.variant.knob)
        if rng is None or r.value in (None, ""):
            continue
        try:
            x = float(r.value)
        except ValueError:
            continue
        if (rng.min is None or x >= rng.min) and (rng.max is None or x <= rng.max):
            continue
        where = value_where(reg, rs, r)
        if where[0] is None:
            where = reg.locate("model", m.name, ("ranges",))
        lo = "" if rng.min is None else f"{rng.min:g}"
        hi = "" if rng.max is None else f"{rng.max:g}"
        own = r.variant.range.min if r.variant.range is not None else None
        takes = "no value" if rng.max is not None and own is not None and rng.max < own else f"{lo}..{hi}"
        report.add(Diagnostic("error", "model-range", f"{r.variant.knob}={r.value}{set_by(rs, r)}: model {m.name} "
                              f"takes {takes} ({rng.basis})", file=where[0], line=where[1], col=where[2],
                              items=[r.variant.id, rs.profile]))
