"""``r9kctl launch --profile P``: validate, then start ``vllm serve`` with the resolved set handed to the
plugin (``R9K_MANIFEST``). ``--dry-run`` prints the exact command and environment instead."""
from __future__ import annotations

from .common import add_set_option


def add_parser(sub):
    p = sub.add_parser("launch", help="validate a profile and start vllm serve with it (or --dry-run)")
    p.add_argument("--profile", "-p", required=True)
    p.add_argument("--tp", type=int)
    add_set_option(p)
    p.add_argument("--dry-run", action="store_true", help="print the command and environment, start nothing")
    p.add_argument("--strict", action="store_true", help="refuse on warnings too; the plugin runs strict")
    p.add_argument("--format", choices=("text", "json"), default="text", help="with --dry-run")
    p.add_argument("extra", nargs="*", metavar="-- VLLM_ARGS", help="extra arguments for vllm serve, after --")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from .common import child_env, load_with_sets, report_errors
    from .launch import exec_plan, plan_launch
    from .output import diagnostics, print_json

    loaded = load_with_sets(args)
    if loaded is None:
        return 2
    reg, sets = loaded
    plan = plan_launch(reg, args.profile, tp=args.tp, sets=sets, strict=args.strict, extra_args=args.extra,
                       write_manifest=not args.dry_run, build_model=not args.dry_run)
    if not plan.ok or (args.strict and plan.report.warnings):
        report_errors(plan.report.diagnostics, args.format)
        import sys

        sys.stderr.write(f"refusing to launch profile '{args.profile}'\n")
        return 2
    diagnostics(plan.report.diagnostics)
    plan.env.update(child_env(args))  # --registry / --profiles-dir: vLLM's processes load the same ones
    if args.dry_run:
        if args.format == "json":
            print_json({"argv": plan.argv, "env": plan.env, "manifest": plan.manifest})
        else:
            print(plan.display())
        return 0
    exec_plan(plan)
    return 0  # not reached
