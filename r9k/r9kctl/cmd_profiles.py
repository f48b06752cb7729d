"""``r9kctl profiles``: the profiles that exist, one line each (name, what it extends, model, TP size,
description). A profile file that does not load is not left out silently: its located error lines follow
the list and the exit code is 2; a profile of ``--profiles-dir`` that replaces a shipped one of the same
name says so in one warning line."""
from __future__ import annotations

from pathlib import Path

from ..registry.errors import Diagnostic
from ..registry.loader import default_profile_dirs

from .common import add_listing_parser, load, print_listing
from .output import diagnostics


def add_parser(sub):
    return add_listing_parser(sub, "profiles", "list the profiles, one line each", run)


def run(args) -> int:
    reg = load(args)
    names = sorted(reg.profiles)
    rows = []
    for name in names:
        p = reg.profiles[name]
        rows.append({"name": name, "extends": p.extends, "model": p.model, "tp": p.tp,
                     "description": p.description, "file": reg.origins.get(("profile", name), ("", 0))[0]})
    columns = [("name", "name"), ("extends", "extends"), ("model", "model"), ("tp", "tp"),
               ("description", "description")]
    code = print_listing(args.format, names, rows, columns, f"{len(rows)} profiles")
    shipped = default_profile_dirs()[0]
    shadows = [Diagnostic("warning", "shadows", f"profile '{r['name']}' here replaces the shipped one of that name "
                                                f"({shipped / (r['name'] + '.toml')})", r["file"], None)
               for r in rows if r["file"] and Path(r["file"]).resolve().parent != shipped
               and (shipped / f"{r['name']}.toml").is_file()]
    broken = [d for ds in reg.profile_problems.values() for d in ds]
    diagnostics(broken + shadows)
    return 2 if any(d.level == "error" for d in broken) else code
