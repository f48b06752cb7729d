"""``r9kctl schema profile``: the JSON Schema of profile files, generated from the registry (every knob
with its allowed values, defaults and summary), for editors that validate and complete TOML (Taplo,
VS Code's Even Better TOML). The shipped profiles name ``profiles/profile.schema.json`` on their first line
(``#:schema ./profile.schema.json``)."""
from __future__ import annotations


def add_parser(sub):
    p = sub.add_parser("schema", help="print a JSON Schema generated from the registry (profile files)")
    p.add_argument("what", choices=("profile",), help="which file kind: profile")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of standard output")
    p.add_argument("--check", metavar="FILE", help="exit 1 when FILE differs from the generated schema")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    import sys
    from pathlib import Path

    from .common import fail, load
    from .profile_schema import dumps, profile_schema

    reg = load(args)
    text = dumps(profile_schema(reg))
    if args.check:
        try:
            have = Path(args.check).read_text(encoding="utf-8")
        except OSError as exc:
            return fail(f"{args.check}: cannot read: {exc.strerror or exc}", "io")
        if have != text:
            sys.stderr.write(f"{args.check}: stale: regenerate with 'r9kctl schema profile --out {args.check}'\n")
            return 1
        print(f"{args.check}: up to date")
        return 0
    if args.out:
        from ..registry.profile_io import atomic_write

        atomic_write(Path(args.out), text)
        return 0
    sys.stdout.write(text)
    return 0
