"""``r9kctl releases``: the release manifests, oldest first, one line each (version, date, the release it
follows, headline)."""
from __future__ import annotations


def add_parser(sub):
    p = sub.add_parser("releases", help="list the releases, one line each")
    p.add_argument("--format", choices=("table", "json", "names"), default="table")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from .common import load
    from .output import print_json, table

    reg = load(args.format, args)
    if reg is None:
        return 2
    versions = reg.release_order()
    if args.format == "names":
        print("\n".join(versions))
        return 0
    rows = []
    for ver in versions:
        r = reg.releases[ver]
        rows.append({"version": ver, "date": r.date, "previous": r.previous, "headline": r.headline,
                     "default_changes": len(r.default_changes)})
    if args.format == "json":
        print_json(rows)
        return 0
    table(["release", "date", "previous", "changes", "headline"],
          [[r["version"], r["date"], r["previous"], r["default_changes"], r["headline"]] for r in rows],
          title=f"{len(rows)} releases (oldest first; 'changes': default changes)")
    return 0
