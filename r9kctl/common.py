"""Helpers shared by the subcommands: loading the registry with located errors, ``--set`` parsing."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from r9k.registry import Registry, RegistryError, load_registry
from r9k.registry.errors import Diagnostic

from .output import diagnostics


def locations(args) -> dict:
    """``load_registry`` arguments for the tree and profile folders named on the command line
    (``--registry``, ``--profiles-dir``, made absolute by ``cli``); None: the environment's, else the
    packaged ones. Given folders come after the default ones: they win."""
    from r9k.registry.loader import default_profile_dirs

    root = getattr(args, "registry", None)
    extra = getattr(args, "profiles_dir", None)
    return {"root": Path(root) if root else None,
            "profile_dirs": default_profile_dirs() + [Path(d) for d in extra] if extra else None}


def load(args) -> Optional[Registry]:
    """The registry ``args`` name, or None after printing its located errors (the caller exits 2)."""
    try:
        return load_registry(**locations(args))
    except RegistryError as exc:
        report_errors(exc.diagnostics, getattr(args, "format", "table"))
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
    reg = load(args)
    return None if reg is None else (reg, sets)


def add_set_option(p) -> None:
    p.add_argument("--set", dest="sets", action="append", metavar="KNOB=VALUE",
                   help="override a knob (by knob or variant id); repeatable; highest precedence")


def fail(msg: str, code: str = "usage") -> int:
    sys.stderr.write(Diagnostic("error", code, msg).format() + "\n")
    return 2
