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
                   help="TOML file with [keys] binding-id = \"keys\" (default: $XDG_CONFIG_HOME/r9k/tui.toml)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    import sys
    from pathlib import Path

    from .common import locations, parse_sets, report_errors
    from .tui.app import R9kApp, config_path, read_config

    sets, errs = parse_sets(args.sets)
    if errs:
        report_errors(errs)
        return 2
    try:
        keys, theme = read_config(Path(args.keymap) if args.keymap else config_path())
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: cannot read the keymap: {exc}\n")
        return 2
    app = R9kApp(profile=args.profile, tp=args.tp, keymap=keys, theme=theme, sets=sets,
                 locations=locations(args))
    result = app.run()
    if isinstance(result, tuple) and result and result[0] == "launch":
        from .launch import exec_plan
        from .output import diagnostics

        plan = result[1].plan_launch(final=True)
        if not plan.ok:  # re-validated at exec time: refuse as r9kctl launch does
            diagnostics(plan.report.diagnostics)
            sys.stderr.write(f"refusing to launch profile '{result[1].profile}'\n")
            return 2
        print(plan.display())
        exec_plan(plan)
    return 0 if app.return_code in (None, 0) else int(app.return_code)
