"""``r9kctl completion SHELL``: a completion script for bash, zsh or fish (commands, options, their
choices, profile, release and knob names). The scripts ask ``r9kctl __complete`` (r9k.r9kctl.completion)."""
from __future__ import annotations

SHELLS = ("bash", "zsh", "fish")


def add_parser(sub):
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish)")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from .completion import script

    print(script(args.shell), end="")
    return 0
