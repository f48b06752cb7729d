"""``r9kctl recipes``: model x TP x platform -> the resolved vLLM switches (value and where it came from) and
this project's non-stock variants (gate state, whether they run on the platform), in markdown or JSON; a
recipe is a shipped profile, or with ``--release`` every model x TP x platform at that release's defaults.
"""
from __future__ import annotations

from typing import Optional

from ..registry.schema import Profile

from .common import load as load_reg, report_errors, usage_error
from .output import print_json

def add_parser(sub):
    p = sub.add_parser("recipes", help="model x TP x platform -> vLLM switches and this project's variants, "
                                       "with gate states (markdown, json)")
    p.add_argument("--profile", "-p", action="append", help="only these profiles (repeatable; default: all)")
    p.add_argument("--release", help="instead of the profiles: every model x TP x platform at this release "
                                     "(latest: the registry's defaults)")
    p.add_argument("--platform", action="append",
                   help="with --release: the platforms (repeatable; default: those the profiles name)")
    p.add_argument("--vllm-version", metavar="X.Y", help="target vLLM (default: the installed one's description)")
    p.add_argument("--format", choices=("markdown", "json"), default="markdown")
    p.set_defaults(func=run)
    return p


def _recipe(reg, rs, iface, gates, avail) -> dict:
    from ..registry.availability import platform_family
    from ..registry.vllm_map import switch_exists, switch_name, switch_on_platform

    sw, ours = [], []
    for r in sorted(rs.items.values(), key=lambda r: (r.variant.area, r.variant.knob)):
        v = r.variant
        if v.vllm is not None:
            if not switch_on_platform(v, rs.platform) or (iface is not None and not switch_exists(v, iface.version)):
                continue
            fam = platform_family(rs.platform) or ""
            vdef = v.vllm.default.get(fam, v.vllm.default.get("all"))
            sw.append({"knob": v.knob, "switch": switch_name(v), "kind": v.sets.kind, "decides": v.vllm.decides,
                       "value": r.value or None, "source": r.source if r.value else "vLLM decides",
                       "vllm_default": vdef, "versions": v.vllm.versions or "all"})
        elif not r.is_stock and r.value not in (None, ""):
            st = gates.get(v.id)
            a = avail.get(v.id)
            ours.append({"knob": v.knob, "variant": v.id, "value": r.value, "source": r.source,
                         "gate": st.state if st is not None else ("no gate tests" if v.gate is None or not v.gate.tests
                                                                  else "unknown"),
                         "gate_detail": st.detail if st is not None else "",
                         "availability": getattr(a, "state", None) if a is not None else None,
                         "why": getattr(a, "reason", "") if a is not None else ""})
    return {"profile": rs.profile, "model": rs.model, "tp": rs.tp, "platform": rs.platform, "release": rs.release,
            "hash": rs.hash, "vllm_version": iface.version if iface is not None else None,
            "vllm_switches": sw, "variants": ours}


def _synthetic(reg, release: str, platforms: list[str]):
    """(name, profile) for every model x TP x platform at ``release``."""
    for m, spec in sorted(reg.models.items()):
        for tp in sorted(spec.tp_sizes):
            for plat in platforms:
                name = f"recipe-{m}-tp{tp}-{plat}".lower().replace("_", "-")
                yield name, Profile(name=name, extends=f"release:{release}", model=m, tp=tp, platform=plat)


def run(args) -> int:
    from ..registry import availability, ledger, manifest
    from ..registry.resolve import resolve, suggest
    from ..registry.vllm_interface import load, target

    reg = load_reg(args)
    if args.vllm_version:
        try:
            iface = load(args.vllm_version)
        except (OSError, KeyError, ValueError) as exc:
            return usage_error("r9kctl recipes", f"--vllm-version {args.vllm_version}: {exc}")
    else:
        iface = target()[0]
    try:
        gates = ledger.gate_states(reg)
    except Exception:  # noqa: BLE001 - no ledger readable: every gate "unknown" is said per row
        gates = {}
    added: list[str] = []
    if args.release:
        order = reg.release_order()
        if args.release not in order:
            near = suggest(args.release, order)
            return usage_error("r9kctl recipes", f"--release {args.release}: no such release"
                               + (f" ({near})" if near else f" (releases: {', '.join(order)})"))
        plats = args.platform or sorted({p.platform for p in reg.profiles.values() if p.platform})
        for name, prof in _synthetic(reg, args.release, plats):
            reg.profiles[name] = prof
            added.append(name)
        names = added
    else:
        names = args.profile or sorted(reg.profiles)
        bad = [n for n in names if n not in reg.profiles]
        if bad:
            near = suggest(bad[0], list(reg.profiles))
            return usage_error("r9kctl recipes", f"--profile {bad[0]}: no such profile" + (f" ({near})" if near else ""))
    out, errors = [], []
    try:
        for n in names:
            rs = resolve(reg, n, env={})
            if not rs.ok:
                errors += rs.diagnostics
                continue
            avail = availability.plan(manifest.from_resolved(rs))
            out.append(_recipe(reg, rs, iface, gates, avail))
    finally:
        for n in added:
            reg.profiles.pop(n, None)
    if errors:
        report_errors(errors, "json" if args.format == "json" else "table")
        return 2
    if args.format == "json":
        print_json(out)
        return 0
    print(markdown(out))
    return 0


def _cell(x: Optional[str]) -> str:
    return (x or "-").replace("|", "\\|")


def markdown(recipes: list[dict]) -> str:
    lines = ["# Recipes: model x TP x platform", ""]
    for r in recipes:
        lines += [f"## {r['model']} tp{r['tp']} {r['platform']} (profile {r['profile']}, {r['release'] or '-'}, "
                  f"hash {r['hash']}, vLLM {r['vllm_version'] or '?'})", "",
                  "| vLLM switch | kind | decides | value | from | vLLM's default | versions |",
                  "|---|---|---|---|---|---|---|"]
        for s in r["vllm_switches"]:
            lines.append(f"| {_cell(s['switch'])} ({s['knob']}) | {s['kind']} | {s['decides']} | {_cell(s['value'])} | "
                         f"{_cell(s['source'])} | {_cell(s['vllm_default'])} | {_cell(s['versions'])} |")
        lines += ["", "| r9k variant | value | from | gate | on this platform |", "|---|---|---|---|---|"]
        for v in r["variants"]:
            lines.append(f"| {v['knob']} | {_cell(v['value'])} | {_cell(v['source'])} | {_cell(v['gate'])} | "
                         f"{_cell(v['availability'])}{': ' + _cell(v['why']) if v['why'] else ''} |")
        lines.append("")
    return "\n".join(lines)
