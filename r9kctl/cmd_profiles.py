"""``r9kctl profiles``: the profiles that exist, one line each (name, what it extends, model, TP size,
description)."""
from __future__ import annotations


def add_parser(sub):
    p = sub.add_parser("profiles", help="list the profiles, one line each")
    p.add_argument("--format", choices=("table", "json", "names"), default="table")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from .common import load
    from .output import print_json, table

    reg = load(args.format, args)
    if reg is None:
        return 2
    names = sorted(reg.profiles)
    if args.format == "names":
        print("\n".join(names))
        return 0
    rows = []
    for name in names:
        p = reg.profiles[name]
        rows.append({"name": name, "extends": p.extends, "model": p.model, "tp": p.tp,
                     "description": p.description, "file": reg.origins.get(("profile", name), ("", 0))[0]})
    if args.format == "json":
        print_json(rows)
        return 0
    table(["name", "extends", "model", "tp", "description"],
          [[r["name"], r["extends"], r["model"], r["tp"], r["description"]] for r in rows],
          title=f"{len(rows)} profiles")
    return 0
