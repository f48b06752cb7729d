"""Helpers shared by the subcommands: loading the registry with located errors, ``--set`` parsing."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Optional

from ..registry import Registry, RegistryError, envvars, load_registry
from ..registry.cmdline import CommandLine, Overrides
from ..registry.errors import Diagnostic
from ..registry.loader import default_profile_dirs

from .output import Exit, diagnostics, print_json, table


def registry_location(args) -> tuple[Optional[Path], Optional[list[Path]]]:
    """(registry root, profile folders) named by ``--registry`` / ``--profiles-dir`` in ``args``; None for
    what they leave at the loader's default. ``--profiles-dir`` folders come after the default ones."""
    if hasattr(args, "registry_root"):  # already worked out by cli.main
        return args.registry_root, args.profile_dirs
    reg = getattr(args, "registry", None)
    root = Path(reg).expanduser().absolute() if reg else None
    extra = getattr(args, "profiles_dir", None)
    dirs = default_profile_dirs() + [Path(d).expanduser().absolute() for d in extra] if extra else None
    return root, dirs


def child_env(args) -> dict[str, str]:
    """What a process started for these options (vLLM at launch) needs in its environment to load the
    same registry and profiles."""
    root, dirs = registry_location(args)
    env: dict[str, str] = {}
    if root is not None:
        env[envvars.REGISTRY.name] = str(root)
    if dirs is not None:
        env[envvars.PROFILES_DIR.name] = os.pathsep.join(str(d) for d in dirs[1:])  # [0] is the packaged folder
    return env


def load(args, profiles: Optional[list[str]] = None) -> Registry:
    """The registry ``args``' global options name (only ``profiles`` and what they extend, when given); one that
    does not load prints its located errors and raises :class:`Exit` (2)."""
    try:
        return load_registry(*registry_location(args), only_profiles=profiles)
    except RegistryError as exc:
        report_errors(exc.diagnostics, getattr(args, "format", "table"))
        raise Exit(2) from None


def add_listing_parser(sub, name: str, help_: str, run):
    """A command that lists one kind of registry entry, one line each: ``--format table|json|names``."""
    p = sub.add_parser(name, help=help_)
    p.add_argument("--format", choices=("table", "json", "names"), default="table")
    p.set_defaults(func=run)
    return p


def print_listing(fmt: str, names: list[str], rows: list[dict], columns: list[tuple[str, str]],
                  title: str) -> int:
    """A listing's output: with ``--format names`` the names one a line, with ``json`` the rows (one dict
    each), else a table of ``columns`` (heading, row key) under ``title``."""
    if fmt == "names":
        print("\n".join(names))
    elif fmt == "json":
        print_json(rows)
    else:
        table([h for h, _ in columns], [[r[k] for _, k in columns] for r in rows], title=title)
    return 0


def report_errors(diags: list[Diagnostic], fmt: str = "table") -> None:
    if fmt == "json":
        print_json({"ok": False, "errors": [d.to_dict() for d in diags if d.level == "error"],
                    "warnings": [d.to_dict() for d in diags if d.level == "warning"]})
    else:
        diagnostics(diags)


def parse_sets(items: Optional[list[str]], words: Optional[list[str]] = None) -> tuple[dict[str, str], list[Diagnostic]]:
    """The ``--set`` overrides; with the command's ``words`` (``args.argv``), each knows where it was typed
    (:class:`r9k.registry.cmdline.Overrides`: its errors are located at ``<command line>:1:COL``)."""
    line = CommandLine(words) if words is not None else None
    out: dict[str, str] = Overrides(command_line=line)
    errs: list[Diagnostic] = []
    for item in items or []:
        if "=" not in item:
            f, ln, col = line.item_where(item) if line is not None else ("--set", None, None)
            errs.append(Diagnostic("error", "bad-set", f"--set {item!r}: expected KNOB=VALUE", f or "--set", ln, col))
            continue
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out, errs


def load_with_sets(args, profiles: Optional[list[str]] = None) -> Optional[tuple[Registry, dict[str, str]]]:
    """The registry and the ``--set`` overrides of ``args``; None after printing what is wrong (exit 2)."""
    fmt = getattr(args, "format", "table")
    sets, errs = parse_sets(getattr(args, "sets", None), getattr(args, "argv", None))
    if errs:
        report_errors(errs, fmt)
        return None
    return load(args, profiles), sets


def load_for_profile(args, command: str) -> Optional[tuple[Registry, dict[str, str]]]:
    """:func:`load_with_sets` for ``args.profile``, then the ``--tp`` check (:func:`tp_problem`); None after
    printing what is wrong (exit 2)."""
    loaded = load_with_sets(args, [args.profile] if args.profile else None)  # that profile's files only
    if loaded is None:
        return None
    problem = tp_problem(loaded[0], args.tp, args.profile)
    if problem:
        usage_error(command, problem, args, "--tp")
        return None
    return loaded


def add_set_option(p) -> None:
    p.add_argument("--set", dest="sets", action="append", metavar="KNOB=VALUE",
                   help="override a knob (by knob or variant id); repeatable; highest precedence")


_WHERE_LINE = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+)(?::(?P<col>\d+))?: (?P<rest>.*)$", re.S)
_WHERE_FILE = re.compile(r"^(?P<file>[^\s:]+\.[A-Za-z0-9]+): (?P<rest>.*)$", re.S)


def error_exit(exc: BaseException | str, prefix: str, kind: str) -> int:
    """Print what went wrong as located lines (``file:line:col: error[kind]: ...``) and return 2: a
    RegistryError's diagnostics, a message's own ``file:line:`` / ``file:`` location, else ``prefix``."""
    if isinstance(exc, RegistryError):
        for d in exc.diagnostics:
            sys.stderr.write(d.format() + "\n")
        return 2
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and getattr(exc, "filename", None) and exc.strerror:
        msg = f"{exc.filename}: {exc.strerror}"
    m = _WHERE_LINE.match(msg) or _WHERE_FILE.match(msg)
    if m:
        loc = m["file"] + "".join(f":{m[g]}" for g in ("line", "col") if m.groupdict().get(g))
        prefix, msg = loc, m["rest"]
    sys.stderr.write(f"{prefix}: error[{kind}]: {msg}\n")
    return 2


def fail(msg: str, code: str = "usage") -> int:
    sys.stderr.write(Diagnostic("error", code, msg).format() + "\n")
    return 2


def usage_error(prefix: str, msg: str, args=None, option: Optional[str] = None) -> int:
    """One line ``PREFIX: error[usage]: MSG`` on stderr; returns 2. With ``args`` and the ``option`` at fault
    typed on its command line: located there instead (``<command line>:1:COL: error[usage]: MSG``)."""
    if option and getattr(args, "argv", None) is not None:
        f, ln, col = CommandLine(args.argv).option_where(option)
        if f:
            sys.stderr.write(Diagnostic("error", "usage", msg, f, ln, col).format() + "\n")
            return 2
    sys.stderr.write(f"{prefix}: error[usage]: {msg}\n")
    return 2


def choice_problem(option: str, values, allowed) -> Optional[str]:
    """What is wrong with ``values`` of an option whose values form a closed set (None when all are
    allowed), with a did-you-mean hint."""
    from ..registry.resolve import suggest

    allowed = list(dict.fromkeys(allowed))
    for v in [values] if isinstance(values, str) else (values or []):
        if v not in allowed:
            hint = suggest(v, allowed)
            return f"{option} {v!r} is not one of: {', '.join(allowed)}" + (f" ({hint})" if hint else "")
    return None


def registry_tps(reg) -> list[int]:
    """The TP sizes the registry knows: those of the variants' defaults and of the models' numbers."""
    keys = {k for v in reg.variants.values() for k in v.defaults}
    keys |= {k for v in reg.variants.values() for d in v.model_defaults.values() for k in d}
    keys |= {k for m in reg.models.values() for k in m.kv_bytes_per_token}
    return sorted(int(k[2:]) for k in keys if k[2:].isdigit())


def tp_problem(reg, tp: Optional[int], profile: Optional[str] = None) -> Optional[str]:
    """What is wrong with a ``--tp`` value (None when usable): a positive integer the profile's model has
    numbers for (without a profile: one the registry knows)."""
    if tp is None:
        return None
    if tp < 1:
        return f"--tp {tp}: a TP size is a positive integer (leave --tp out for the profile's own)"
    if profile is not None:
        from ..registry.resolve import profile_chain

        if profile not in reg.profiles:
            return None  # the command reports the unknown profile
        chain, _, _ = profile_chain(reg, profile)
        model = next((p.model for p in reversed(chain) if p.model), None)
        m = reg.models.get(model) if model else None
        if m is not None and not m.supports_tp(tp):
            known = sorted(int(k[2:]) for k in m.kv_bytes_per_token if f"tp{k[2:]}" in m.weight_bytes_per_gpu)
            return (f"--tp {tp}: model '{model}' of profile '{profile}' is described at TP "
                    f"{', '.join(map(str, known)) or 'no size'} only (registry/models.toml)")
        return None
    known = registry_tps(reg)
    if known and tp not in known:
        return f"--tp {tp}: the registry knows TP {', '.join(map(str, known))} only"
    return None


def profile_problem(reg, name: Optional[str], option: str = "--profile") -> Optional[str]:
    """An unknown profile name, with a did-you-mean hint (None when it exists or is not given). A profile
    whose file does not load is not unknown: resolving it reports its own errors."""
    if name is None or name in reg.profiles or name in getattr(reg, "profile_problems", {}):
        return None
    return choice_problem(option, [name], sorted(reg.profiles))
