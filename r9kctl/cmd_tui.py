"""``r9kctl tui [--profile P] [--tp N] [--set KNOB=VALUE] [--keymap FILE]``: the control panel (a Textual
app). A confirmed launch leaves the app, then takes the same path as ``r9kctl launch`` (validate, manifest,
exec of vllm serve)."""
from __future__ import annotations


def add_parser(sub):
    p = sub.add_parser("tui", help="control panel: show, toggle and validate profiles, diff, save, launch")
    p.add_argument("--profile", "-p", help="profile to open (default: tp4-default)")
    p.add_argument("--tp", type=int, help="show the profile at this TP size")
    p.add_argument("--set", dest="sets", action="append", metavar="KNOB=VALUE",
                   help="override a knob for this session (the override layer, as for r9kctl launch); repeatable")
    p.add_argument("--keymap", metavar="FILE",
                   help="TOML file with [keys] binding-id = \"keys\" and theme = \"r9k-light\" (default: "
                        "$XDG_CONFIG_HOME/r9k/tui.toml where it exists); a missing FILE is an error")
    p.set_defaults(func=run)
    return p


THEMES = ("r9k-dark", "r9k-light")


def read_keymap(path, explicit: bool) -> tuple[dict[str, str], str | None]:
    """([keys] binding id -> keys, theme) of the control panel's TOML config, through the checked reader:
    any problem is a located FileError (exit 2). The default file may be missing; one named by --keymap
    may not."""
    import os

    from ..registry import fileio
    from ..registry.loader import locate

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


def run(args) -> int:
    import sys
    from pathlib import Path

    from .common import child_env, load, parse_sets, profile_problem, registry_location, report_errors, tp_problem
    from .common import usage_error
    from .tui.app import R9kApp, config_path

    sets, errs = parse_sets(args.sets)
    if errs:
        report_errors(errs)
        return 2
    keys, theme = read_keymap(Path(args.keymap) if args.keymap else config_path(), explicit=bool(args.keymap))
    reg = load("table", args)  # the panel opens on a profile: one that does not exist is an error here
    if reg is None:
        return 2
    problem = profile_problem(reg, args.profile) or tp_problem(reg, args.tp, args.profile or "tp4-default")
    if problem:
        return usage_error("r9kctl tui", problem)
    root, dirs = registry_location(args)
    app = R9kApp(profile=args.profile, tp=args.tp, keymap=keys, theme=theme, sets=sets, registry_root=root,
                 profile_dirs=dirs)
    result = app.run()
    if isinstance(result, tuple) and result and result[0] == "launch":
        from .launch import exec_plan
        from .output import diagnostics

        session = result[1]
        plan = session.plan_launch(final=True)
        if not plan.ok:  # re-validated at exec time: refuse as r9kctl launch does
            diagnostics(plan.report.diagnostics)
            sys.stderr.write(f"refusing to launch profile '{session.profile}'\n")
            return 2
        plan.env.update(child_env(args))  # vLLM's processes load the same registry and profiles
        print(plan.display())
        exec_plan(plan)
    return 0 if app.return_code in (None, 0) else int(app.return_code)
