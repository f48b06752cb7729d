"""Helpers shared by the subcommands: loading the registry with located errors, ``--set`` parsing."""
from __future__ import annotations

import re
import sys
from typing import Optional

from r9k.registry import Registry, RegistryError, load_registry
from r9k.registry.errors import Diagnostic

from .output import diagnostics


def load(fmt: str = "table") -> Optional[Registry]:
    """The registry, or None after printing its located errors (the caller exits 2)."""
    try:
        return load_registry()
    except RegistryError as exc:
        report_errors(exc.diagnostics, fmt)
        return None


def report_errors(diags: list[Diagnostic], fmt: str = "table") -> None:
    if fmt == "json":
        import json

        print(json.dumps({"ok": False, "errors": [d.to_dict() for d in diags if d.level == "error"],
                          "warnings": [d.to_dict() for d in diags if d.level == "warning"]}, indent=2))
    else:
        diagnostics(diags)


def parse_sets(items: Optional[list[str]]) -> tuple[dict[str, str], list[Diagnostic]]:
    out: dict[str, str] = {}
    errs: list[Diagnostic] = []
    for item in items or []:
        if "=" not in item:
            errs.append(Diagnostic("error", "bad-set", f"--set {item!r}: expected KNOB=VALUE", "--set"))
            continue
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out, errs


def load_with_sets(args) -> Optional[tuple[Registry, dict[str, str]]]:
    """The registry and the ``--set`` overrides of ``args``; None after printing what is wrong (exit 2)."""
    fmt = getattr(args, "format", "table")
    sets, errs = parse_sets(getattr(args, "sets", None))
    if errs:
        report_errors(errs, fmt)
        return None
    reg = load(fmt)
    return None if reg is None else (reg, sets)


def add_set_option(p) -> None:
    p.add_argument("--set", dest="sets", action="append", metavar="KNOB=VALUE",
                   help="override a knob (by knob or variant id); repeatable; highest precedence")


_WHERE_LINE = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+)(?::(?P<col>\d+))?: (?P<rest>.*)$", re.S)
_WHERE_FILE = re.compile(r"^(?P<file>[^\s:]+\.[A-Za-z0-9]+): (?P<rest>.*)$", re.S)


def error_exit(exc: BaseException | str, prefix: str, kind: str) -> int:
    """Print what went wrong as located lines (``file:line:col: error[kind]: ...``) and return 2.

    A RegistryError prints its diagnostics; a message that starts with ``file:line:`` or ``file:`` (the
    evidence modules' style) is given the ``error[kind]`` tag after its location; anything else gets
    ``prefix`` (e.g. ``r9kctl bisect plan``) as its location."""
    if isinstance(exc, RegistryError):
        for d in exc.diagnostics:
            sys.stderr.write(d.format() + "\n")
        return 2
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and getattr(exc, "filename", None) and exc.strerror:
        msg = f"{exc.filename}: {exc.strerror}"
    m = _WHERE_LINE.match(msg)
    if m:
        loc = f"{m['file']}:{m['line']}" + (f":{m['col']}" if m["col"] else "")
        sys.stderr.write(f"{loc}: error[{kind}]: {m['rest']}\n")
        return 2
    m = _WHERE_FILE.match(msg)
    if m:
        sys.stderr.write(f"{m['file']}: error[{kind}]: {m['rest']}\n")
        return 2
    sys.stderr.write(f"{prefix}: error[{kind}]: {msg}\n")
    return 2


def fail(msg: str, code: str = "usage") -> int:
    sys.stderr.write(Diagnostic("error", code, msg).format() + "\n")
    return 2
