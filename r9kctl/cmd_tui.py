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


def run(args) -> int:
    import sys
    from pathlib import Path

    from r9k.registry.errors import Diagnostic

    from .common import child_env, parse_sets, registry_location, report_errors
    from .tui.app import R9kApp, config_path, read_config

    sets, errs = parse_sets(args.sets)
    if errs:
        report_errors(errs)
        return 2
    if args.keymap and not Path(args.keymap).is_file():
        report_errors([Diagnostic("error", "keymap", "no such keymap file", args.keymap)])
        return 2
    try:
        keys, theme = read_config(Path(args.keymap) if args.keymap else config_path())
    except ValueError as exc:  # tomllib's message has the line and column
        report_errors([Diagnostic("error", "toml-syntax", f"keymap: {exc}", args.keymap or str(config_path()))])
        return 2
    except OSError as exc:
        report_errors([Diagnostic("error", "keymap", f"cannot read the keymap: {exc.strerror or exc}",
                                  args.keymap or str(config_path()))])
        return 2
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
