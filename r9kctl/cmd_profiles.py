"""``r9kctl profiles``: the profiles that exist, one line each (name, what it extends, model, TP size,
description)."""
from __future__ import annotations


def add_parser(sub):
    from .common import add_listing_parser

    return add_listing_parser(sub, "profiles", "list the profiles, one line each", run)


def run(args) -> int:
    from .common import load, print_listing

    reg = load(args)
    names = sorted(reg.profiles)
    rows = []
    for name in names:
        p = reg.profiles[name]
        rows.append({"name": name, "extends": p.extends, "model": p.model, "tp": p.tp,
                     "description": p.description, "file": reg.origins.get(("profile", name), ("", 0))[0]})
    columns = [("name", "name"), ("extends", "extends"), ("model", "model"), ("tp", "tp"),
               ("description", "description")]
    return print_listing(args.format, names, rows, columns, f"{len(rows)} profiles")
