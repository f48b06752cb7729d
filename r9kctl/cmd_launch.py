"""``r9kctl launch --profile P``: validate, then start ``vllm serve`` with the resolved set handed to the
plugin (``envvars.MANIFEST``). ``--dry-run`` prints the exact command and environment instead: pasted into a
shell they start the same server (the manifest they name is written, the model reference is a path)."""
from __future__ import annotations

from ..registry import envvars

from .common import add_set_option

EPILOG = f"""\
more than one process, more than one node:
  --tp N starts vLLM with --tensor-parallel-size N. Every vLLM process (API server, engine core, each
  worker) checks the resolved set's hash; the resolved set also travels in the environment
  ({envvars.MANIFEST_DATA.name}), so a worker that cannot read the launcher's files (another node, another
  directory) resolves the same set from its own installation and refuses on a different hash.
  CPU backend, TP 2 on one machine:
    VLLM_CPU_OMP_THREADS_BIND=nobind r9kctl launch --profile cpu-smoke --tp 2
  Several nodes through Ray (vLLM's distributed executor; every node has this project and the same
  registry installed; start the head first, then each worker node, then launch on the head):
    ray start --head --port 6379                    # node 1
    ray start --address <head-ip>:6379              # node 2, ...
    r9kctl launch --profile P --tp N -- --distributed-executor-backend ray
  Ray copies the variables vLLM knows to its workers: the plugin declares R9K_* (and the hash) to vLLM.
  Results on this machine (and why the CPU backend runs Ray or not): notes/plugin.md.
"""


def add_parser(sub):
    import argparse

    p = sub.add_parser("launch", help="validate a profile and start vllm serve with it (or --dry-run)",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    from .common import child_env, load_for_profile, report_errors
    from .launch import exec_plan, plan_launch
    from .output import diagnostics, print_json

    loaded = load_for_profile(args, "r9kctl launch")
    if loaded is None:
        return 2
    reg, sets = loaded
    # --dry-run writes the manifest and builds a tiny model too: what it prints starts the server as pasted.
    plan = plan_launch(reg, args.profile, tp=args.tp, sets=sets, strict=args.strict, extra_args=args.extra)
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
    from .launch import serve_problem

    problem = serve_problem()
    if problem:
        import sys

        sys.stderr.write(f"r9kctl launch: cannot start vllm serve: {problem}\n")
        return 2
    exec_plan(plan)
    return 0  # not reached
