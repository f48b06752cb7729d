"""``r9kctl releases``: the release files, oldest first, one line each (version, date, the release it
follows, headline)."""
from __future__ import annotations

from .common import add_listing_parser, load, print_listing


def add_parser(sub):
    return add_listing_parser(sub, "releases", "list the releases, one line each", run)


def run(args) -> int:
    reg = load(args)
    versions = reg.release_order()
    rows = []
    for ver in versions:
        r = reg.releases[ver]
        rows.append({"version": ver, "date": r.date, "previous": r.previous, "headline": r.headline,
                     "default_changes": len(r.default_changes)})
    columns = [("release", "version"), ("date", "date"), ("previous", "previous"),
               ("changes", "default_changes"), ("headline", "headline")]
    return print_listing(args.format, versions, rows, columns,
                         f"{len(rows)} releases (oldest first; 'changes': default changes)")
