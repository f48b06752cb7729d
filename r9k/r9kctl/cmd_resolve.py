"""``r9kctl resolve --profile P``: the active set with every value's provenance."""
from __future__ import annotations

from ..registry.redact import export_line

from .common import add_set_option, load_for_profile, report_errors
from .output import diagnostics, print_json, table


def add_parser(sub):
    p = sub.add_parser("resolve", help="resolve a profile: every knob's value and where it came from")
    p.add_argument("--profile", "-p", required=True)
    p.add_argument("--tp", type=int, help="TP size (default: the profile's)")
    add_set_option(p)
    p.add_argument("--format", choices=("table", "env", "json"), default="table",
                   help="table; env: lines a shell can source (export KNOB=value); json: the manifest")
    p.add_argument("--non-stock", action="store_true", help="only knobs not at their stock value")
    p.add_argument("--strict", action="store_true", help="undeclared R9K_ variables are errors")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..registry.resolve import resolve

    loaded = load_for_profile(args, "r9kctl resolve")
    if loaded is None:
        return 2
    reg, sets = loaded
    rs = resolve(reg, args.profile, tp=args.tp, sets=sets, strict=args.strict or None)
    if not rs.ok:
        report_errors(rs.diagnostics, args.format)
        return 2
    diagnostics(rs.diagnostics)
    if args.format == "json":
        print_json(rs.to_manifest())
        return 0
    if args.format == "env":
        print(f"# r9k profile {rs.profile} tp{rs.tp} hash {rs.hash}")
        for k, v in rs.env().items():
            print(export_line(k, v))  # quoted for POSIX shells; a credential masked (a comment, not exported)
        return 0
    items = rs.non_stock() if args.non_stock else [r for r in rs.items.values() if r.value is not None]
    items.sort(key=lambda r: (r.variant.area, r.variant.knob))
    table(["knob", "value", "stock", "layer", "source"],
          [[r.variant.knob, r.value, r.variant.stock, r.layer, r.source] for r in items],
          title=f"profile {rs.profile} (chain {' < '.join(rs.chain)}), model {rs.model}, tp{rs.tp}, hash {rs.hash}: "
                f"{len(rs.active())} active of {len(rs.items)}")
    return 0
