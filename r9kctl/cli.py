"""``r9kctl``: the command line of r9k-stack.

Each subcommand lives in its own module ``r9k.r9kctl.cmd_<name>`` with ``add_parser(subparsers)``
(cheap: no heavy imports) and a ``run(args) -> int`` set as the parser's ``func``. Exit codes: 0 fine,
1 warnings under ``--strict`` (or a comparison that failed its test), 2 errors.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from r9k.registry import envvars
from r9k.registry.errors import RegistryError

# Subcommand modules, in the order ``--help`` lists them.
COMMANDS = [
    "list", "show", "resolve", "validate", "diff", "launch", "tui", "status", "gate", "eval", "bisect", "bench",
]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, just that subcommand's module is imported (a faster start)."""
    p = argparse.ArgumentParser(
        prog="r9kctl",
        description="Declarative, checked kernel variants and serving profiles for vLLM.",
        epilog=f"Every command takes --registry DIR (or ${envvars.REGISTRY.name}) and --profiles-dir DIR (or "
               f"${envvars.PROFILES_DIR.name}).",
    )
    p.add_argument("--registry", metavar="DIR", help="registry tree to use instead of the packaged one")
    p.add_argument("--profiles-dir", metavar="DIR", action="append",
                   help="extra folder of profiles (repeatable; later folders win)")
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in ([only] if only else COMMANDS):
        try:
            mod = importlib.import_module(f"r9k.r9kctl.cmd_{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"r9k.r9kctl.cmd_{name}":
                continue  # a command not shipped in this build
            raise
        mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 fine, 1 warnings under --strict or a failed comparison, 2 bad input
    (one located line per fault), 3 an unexpected exception: one line saying it is a bug, and how to get the
    traceback (``R9K_DEBUG=1``). A traceback is never printed otherwise."""
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(words)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except RegistryError as exc:  # a file that cannot be read, raised from anywhere: its located lines
        for d in exc.diagnostics:
            sys.stderr.write(d.format() + "\n")
        return 2
    except Exception as exc:  # noqa: BLE001 - the catch-all: one line, never a bare traceback
        if envvars.DEBUG.on():
            raise
        return internal_error(exc, words)


def internal_error(exc: BaseException, words: list[str]) -> int:
    """Report an unexpected exception in one line; exit 3."""
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:300] + "..."
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    cmd = " ".join(["r9kctl", *words])
    sys.stderr.write(f"r9kctl: error[internal]: {type(exc).__name__}{': ' + text if text else ''}{where}; this is a "
                     f"bug in r9kctl, please report it (the traceback: {envvars.DEBUG.name}=1 {cmd})\n")
    return 3


def _main(words: list[str]) -> int:
    # the first word naming a command; an option's value never names one here (they are paths and names)
    chosen = next((w for w in words if w in COMMANDS), None)
    parser = build_parser(chosen)
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    # passed on as arguments (common.locations), never through this process's environment
    if args.registry:
        args.registry = os.path.abspath(os.path.expanduser(args.registry))
    if args.profiles_dir:
        args.profiles_dir = [os.path.abspath(os.path.expanduser(d)) for d in args.profiles_dir]
    if args.plain:
        from .output import force_plain

        force_plain()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
