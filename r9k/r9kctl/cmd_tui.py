"""``r9kctl tui``: the control panel (a Textual app). A confirmed launch takes ``r9kctl launch``'s path but
starts vLLM in the background and follows ``GET /r9k/status``; ``--attach URL`` follows a server started
elsewhere; ``--serve`` serves the panel to a browser (r9kctl/tui/web.py). Without a terminal it refuses, exit 2."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..registry import fileio
from ..registry.loader import locate

from .common import child_env, load, parse_sets, profile_problem, registry_location, report_errors, tp_problem
from .common import usage_error

def add_parser(sub):
    p = sub.add_parser("tui", help="control panel: show, toggle and validate profiles, diff, save, launch")
    p.add_argument("--profile", "-p", help="profile to open (default: tp4-default)")
    p.add_argument("--tp", type=int, help="show the profile at this TP size")
    p.add_argument("--set", dest="sets", action="append", metavar="KNOB=VALUE",
                   help="override a knob for this session (the override layer, as for r9kctl launch); repeatable")
    p.add_argument("--keymap", metavar="FILE",
                   help="TOML file with [keys] binding-id = \"keys\" and theme = \"r9k-light\" (default: "
                        "$XDG_CONFIG_HOME/r9k/tui.toml where it exists); a missing FILE is an error")
    p.add_argument("--attach", metavar="URL",
                   help="the server screen alone, on a server started elsewhere (e.g. http://127.0.0.1:8000)")
    p.add_argument("--serve", action="store_true",
                   help="serve the panel to a web browser (needs textual-serve: pip install 'r9k-stack[web]')")
    p.add_argument("--port", type=int, default=8080, help="with --serve: the port (default 8080)")
    p.add_argument("--host", default="127.0.0.1",
                   help="with --serve: the address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--max-panels", type=int, default=4,
                   help="with --serve: the most browser panels at once (each a ~55 MB process; default 4)")
    p.set_defaults(func=run)
    return p


THEMES = ("r9k-dark", "r9k-light")


def read_keymap(path, explicit: bool) -> tuple[dict[str, str], str | None]:
    """([keys] binding id -> keys, theme) of the control panel's TOML config, through the checked reader:
    any problem is a located FileError (exit 2). The default file may be missing; one named by --keymap
    may not."""
    if not explicit and not os.path.lexists(path):
        return {}, None
    if not os.path.lexists(path):
        raise fileio.error(path, "keymap", "no such keymap file")
    text = fileio.read_text(path, "keymap")
    data = fileio.parse_toml(text, path, "keymap")

    def bad(loc: tuple, msg: str):
        line, col = locate(text, loc)
        return fileio.error(path, "keymap", msg, line or 1, col or 1)

    for k in data:
        if k not in ("keys", "theme"):
            raise bad((k,), f"unknown key '{k}' (a keymap has [keys] and theme)")
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise bad(("keys",), "'keys' must be a table: [keys] binding-id = \"keys\"")
    for k, v in keys.items():
        if not isinstance(v, str) or not v.strip():
            raise bad(("keys", k), f"keys.{k} must be a non-empty string of keys (e.g. \"ctrl+s\"), not {v!r}")
    theme = data.get("theme")
    if theme is not None and theme not in THEMES:
        from ..registry.resolve import suggest

        hint = suggest(str(theme), THEMES)
        raise bad(("theme",), f"theme {theme!r} is not one of {', '.join(THEMES)}" + (f" ({hint})" if hint else ""))
    return {str(k): v for k, v in keys.items()}, theme


def panel_argv(args) -> list[str]:
    """The ``r9kctl tui`` command line that ``--serve`` runs for each browser (the same options, no --serve)."""
    # the console script where there is one: "python -m" would put the working directory first on sys.path
    script = Path(sys.executable).parent / "r9kctl"
    argv = [str(script) if script.exists() else sys.executable, *([] if script.exists() else ["-m", "r9k.r9kctl.cli"]),
            "tui"]
    for flag, value in (("--profile", args.profile), ("--tp", args.tp), *(("--set", s) for s in args.sets or []),
                        ("--keymap", args.keymap), ("--attach", args.attach), ("--registry", args.registry),
                        *(("--profiles-dir", d) for d in args.profiles_dir or [])):
        if value not in (None, ""):
            argv += [flag, str(value)]
    return argv


def tty_ok() -> bool:
    """stdout is a terminal, or textual-serve runs the panel with its web driver (stdout is then the pipe
    to the browser, as it should be)."""
    return sys.stdout.isatty() or bool(os.environ.get("TEXTUAL_DRIVER"))


def no_terminal() -> int:
    return usage_error("r9kctl tui", "stdout is not a terminal: the control panel needs one (r9kctl resolve, "
                                     "validate and launch --dry-run print the same facts as text)")


def run(args) -> int:
    sets, errs = parse_sets(args.sets)
    if errs:
        report_errors(errs)
        return 2
    if args.serve:
        from .tui.web import serve

        return serve(panel_argv(args), host=args.host, port=args.port, max_panels=args.max_panels)
    from .tui.app import R9kApp, config_path

    keys, theme = read_keymap(Path(args.keymap) if args.keymap else config_path(), explicit=bool(args.keymap))
    if args.attach:
        if not tty_ok():
            return no_terminal()
        app = R9kApp(attach=args.attach, keymap=keys, theme=theme)
        app.run()
        return 0 if app.return_code in (None, 0) else int(app.return_code)
    reg = load(args)  # the panel opens on a profile: one that does not exist is an error here
    problem = profile_problem(reg, args.profile) or tp_problem(reg, args.tp, args.profile or "tp4-default")
    if problem:
        return usage_error("r9kctl tui", problem)
    if not tty_ok():
        return no_terminal()
    root, dirs = registry_location(args)
    app = R9kApp(profile=args.profile, tp=args.tp, keymap=keys, theme=theme, sets=sets, registry_root=root,
                 profile_dirs=dirs)
    app.child_env = child_env(args)  # --registry / --profiles-dir: vLLM's processes load the same ones
    try:
        app.run()
    finally:
        rc = app.stop_server()  # nothing the panel started stays behind
        if rc is not None:
            sys.stderr.write(f"r9kctl tui: stopped the server the panel started (exit code {rc})\n")
    return 0 if app.return_code in (None, 0) else int(app.return_code)
