"""Slow fallbacks: what vLLM chose per layer (:func:`r9k.plugin.report.read_model`) against the fast path
declared for this platform (``[variant.vllm] fast`` in registry/variants/vllm.toml).

A switch left to vLLM (stock, or ``auto``) whose layers run something else took a slower path by itself (a
backend silently replaced for a shape, dtype or build): one warning each, naming the layers and the setting
that restores the fast path; in strict mode the start stops. What vLLM did with an explicit request is
:func:`r9k.plugin.report.choices_compare`'s.
"""
from __future__ import annotations

from typing import Optional

from ..registry.availability import platform_family
from ..registry.vllm_map import _active, describe, mapping, switch_name


def _flat(s: str) -> str:
    return s.lower().replace("-", "_")


def _ran(var, chosen: dict) -> Optional[dict[str, int]]:
    """What the layers the switch decides ran: value -> layers; None when the model has no such layer."""
    m = mapping(var.sets)
    if m.kind == "custom-op":
        e = chosen.get("custom_ops", {}).get(m.name)
        if e is None or e.get("enabled") is None:
            return None
        return {"+" if e["enabled"] else "-": e["layers"]}
    kind = {"--attention-backend": "attention", "--moe-backend": "moe", "--linear-backend": "linear",
            "VLLM_GDN_DECODE_KERNEL": "gdn"}.get(m.name)
    if kind is None:
        return None
    got = {k: e["layers"] for k, e in chosen.get("layers", {}).get(kind, {}).items()
           if kind != "linear" or "Unquantized" not in (e.get("method") or "")}
    return got or None


def _is(fast: str, name: str, kind: str) -> bool:
    if kind in ("custom-op", "vllm-arg") and name in ("+", "-"):
        return name == fast
    return name == fast or _flat(fast) in _flat(name)


def find(rs, chosen: dict, platform: Optional[str] = None) -> list[dict]:
    """One row per switch left to vLLM whose layers did not all run the fast path declared for ``platform``
    (default: the set's), with what ran and the restoring setting."""
    fam = platform_family(platform or rs.platform)
    out = []
    for r in sorted(rs.items.values(), key=lambda r: r.variant.knob):
        var = r.variant
        sw = getattr(var, "vllm", None)
        fast = (sw.fast or {}).get(fam) or (sw.fast or {}).get("all") if sw is not None else None
        if not fast or var.sets is None or (_active(r) and r.value != "auto"):
            continue
        ran = _ran(var, chosen)
        if not ran:
            continue
        kind = mapping(var.sets).kind
        slow = {k: n for k, n in ran.items() if not _is(fast, k, kind)}
        if slow:
            out.append({"knob": var.knob, "switch": switch_name(var), "layer": sw.decides, "fast": fast,
                        "platform": fam, "ran": ran, "slow_layers": sum(slow.values()), "slow": sorted(slow),
                        "restore": f"{var.knob}={fast} ({describe(var.sets)})"})
    return out


def lines(rows: list[dict], prefix: str) -> list[str]:
    return [f"{prefix} FALLBACK {r['knob']}: vLLM ran {', '.join(r['slow'])} in {r['slow_layers']} {r['layer']} "
            f"layer(s) where the fast path on {r['platform']} is {r['fast']}; restore it with {r['restore']}"
            for r in rows]


def check(rs, res: dict, emit) -> list[dict]:
    """Find the fallbacks of ``res`` (:func:`r9k.plugin.report.choices_build`'s), record them, emit a line each."""
    rows = find(rs, res)
    res["fallbacks"] = rows
    for ln in lines(rows, "r9k:"):
        emit(ln)
    return rows


def refuse(rows: list[dict]) -> None:
    """Strict mode: a StartupError naming each fallback (the engine has not served yet)."""
    if rows:
        from .startup import StartupError

        raise StartupError([f"error[slow-fallback]: {ln.removeprefix('r9k: FALLBACK ')} (strict mode)"
                            for ln in lines(rows, "r9k:")],
                           "r9k: vLLM fell back to a slower kernel path; refusing to serve")
