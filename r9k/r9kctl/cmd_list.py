"""``r9kctl list``: the registry's variants, filtered."""
from __future__ import annotations

from typing import get_args

from .common import choice_problem, load, usage_error
from .output import print_json, table


def add_parser(sub):
    p = sub.add_parser("list", help="list variants (filter by area, category, status, TP)")
    p.add_argument("--area", action="append", help="only this area (repeatable)")
    p.add_argument("--category", action="append",
                   help="only this category: fusion, kernel, comm, tuning, diagnostic, launcher (repeatable)")
    p.add_argument("--status", action="append", help="only this status: default-on, opt-in, rejected, removed")
    p.add_argument("--tp", type=int, help="only variants with a default at this TP size; show that default")
    p.add_argument("--search", "-s", help="substring of id, knob or summary")
    p.add_argument("--vllm", action="store_true", help="only vLLM's own switches: switch, versions, platforms, "
                   "values and vLLM's default")
    p.add_argument("--vllm-version", metavar="X.Y", help="only vLLM's own switches that vLLM X.Y has (its description "
                   "in registry/vllm/), with the values that version accepts")
    p.add_argument("--format", choices=("table", "json", "ids"), default="table")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..registry.schema import Category, Status
    from ..registry.vllm_map import accepted_values, switch_exists, switch_name
    from ..registry.vllm_interface import load as load_iface, versions

    reg = load(args)
    problem = (choice_problem("--category", args.category, get_args(Category))
               or choice_problem("--status", args.status, get_args(Status))
               or choice_problem("--area", args.area, sorted({v.area for v in reg.variants.values()}))
               or (choice_problem("--tp", [str(args.tp)], [str(t) for t in sorted(
                   {int(k[2:]) for v in reg.variants.values() for k in v.defaults})]) if args.tp is not None else None))
    iface = None
    if args.vllm_version:
        iface = load_iface(args.vllm_version)
        if iface is None:
            return usage_error("r9kctl list", f"--vllm-version {args.vllm_version}: no description ships (have "
                               f"{', '.join(versions())})")
    if problem:
        return usage_error("r9kctl list", problem)
    rows = []
    needle = (args.search or "").lower()
    for vid in sorted(reg.variants, key=lambda i: (reg.variants[i].area, i)):
        v = reg.variants[vid]
        if args.area and v.area not in args.area:
            continue
        if args.category and v.category not in args.category:
            continue
        if args.status and v.status.state not in args.status:
            continue
        if args.tp is not None and f"tp{args.tp}" not in v.defaults:
            continue
        if needle and needle not in f"{vid} {v.knob} {v.summary}".lower():
            continue
        if (args.vllm or iface is not None) and v.vllm is None:
            continue
        if iface is not None and not switch_exists(v, iface.version):
            continue
        rows.append(v)
    if args.format == "json":
        print_json([v.model_dump(mode="json", by_alias=True, exclude_defaults=True) for v in rows])
        return 0
    if args.format == "ids":
        print("\n".join(v.id for v in rows))
        return 0
    if args.vllm or iface is not None:
        out = []
        for v in rows:
            vals = accepted_values(v, iface) if iface is not None else (list(v.choices) or None)
            out.append([v.knob, switch_name(v), v.vllm.versions or ", ".join(versions()),
                        ", ".join(v.vllm.platforms) or "all", v.vllm.decides,
                        f"{len(vals)}: {', '.join(vals)}" if vals else v.type,
                        "; ".join(f"{k}: {x}" for k, x in v.vllm.default.items())])
        where = f"in vLLM {iface.version}" if iface is not None else "declared"
        table(["knob", "vLLM switch", "versions", "platforms", "decides", "values", "vLLM's default"], out,
              title=f"{len(rows)} of vLLM's switches {where}")
        return 0
    key = f"tp{args.tp}" if args.tp is not None else None
    cols = ["id", "knob", "area", "category", "status", "stock"] + ([key] if key else ["tp4", "tp2"]) + ["summary"]
    out = []
    for v in rows:
        defaults = [v.defaults.get(key)] if key else [v.defaults.get("tp4"), v.defaults.get("tp2")]
        out.append([v.id, v.knob, v.area, v.category, v.status.state, v.stock] + defaults + [v.summary])
    table(cols, out, title=f"{len(rows)} of {len(reg.variants)} variants")
    return 0
