"""``r9kctl launch --profile P``: validate, then start ``vllm serve`` with the resolved set handed to the
plugin in vLLM's own config (``--additional-config '{"r9k": ...}'``). ``--dry-run`` prints the exact command
and environment instead: pasted into a shell they start the same server (the model reference is a path).
``--nnodes N`` prints (``--dry-run``) or runs (``--node-rank R``) one command per node, all with the same set.
Without this command, ``vllm serve`` with ``envvars.PROFILE`` set resolves the profile in its first process."""
from __future__ import annotations

import sys
from pathlib import Path

from ..registry import envvars, fileio
from ..registry.redact import masked

from .cmd_validate import group_platform_warnings, strict_exit_code
from .common import add_set_option, child_env, load_for_profile, report_errors, usage_error
from .output import diagnostics, print_json

EPILOG = f"""\
exit codes (one rule, as validate): 0 started or printed; 1 valid without --strict but refused by it; 2 refused:
  invalid profile, a flag or variable the target vLLM does not take, a failed pre-flight (model path or hub id,
  platform and device count, vLLM version a release was validated on; --no-preflight skips it); 3 a bug.

more than one process, more than one node:
  --tp N starts vLLM with --tensor-parallel-size N. The resolved set travels in vLLM's config
  (--additional-config '{{"r9k": {{hash, path}}}}', the manifest file the launch wrote; with --nnodes, Ray or
  --inline-manifest '{{"r9k": {{hash, server, manifest}}}}', the manifest itself, so no node needs the
  launcher's files): pickled to every engine core and worker, and on the command line of every node, so no
  process resolves again. Every process checks the set's hash and the registry fingerprint; once vLLM's world
  group exists every rank publishes its set in the group's store and a difference stops the start, naming
  node, rank and knob.
  CPU backend, TP 2 on one machine:
    VLLM_CPU_OMP_THREADS_BIND=nobind r9kctl launch --profile cpu-smoke --tp 2
  Several nodes through Ray (vLLM's distributed executor; every node has this project and the same
  registry installed; start the head first, then each worker node, then launch on the head):
    ray start --head --port 6379                    # node 1
    ray start --address <head-ip>:6379              # node 2, ...
    r9kctl launch --profile P --tp N -- --distributed-executor-backend ray
  Ray copies the variables vLLM knows to its workers: the plugin declares every knob and control variable
  to vLLM (tests/plugin/test_multinode.py checks them against vLLM's Ray copy).
  Several nodes without Ray (vLLM's multiprocessing executor; same installation on every node):
    r9kctl launch --profile P --tp N --nnodes 2 --master-addr <head-ip> --dry-run    # both commands
    r9kctl launch --profile P --tp N --nnodes 2 --master-addr <head-ip> --node-rank 1  # on node 1 (headless)
    r9kctl launch --profile P --tp N --nnodes 2 --master-addr <head-ip> --node-rank 0  # on the head
  Results on this machine: notes/multinode.md.
"""


def add_parser(sub):
    p = sub.add_parser("launch", help="validate a profile and start vllm serve with it (or --dry-run)",
                       description=__doc__, epilog=EPILOG)
    p.add_argument("--profile", "-p", required=True, help="the profile to launch (r9kctl profiles lists them)")
    p.add_argument("--tp", type=int, help="tensor-parallel size (vLLM's --tensor-parallel-size), instead of the profile's")
    add_set_option(p)
    p.add_argument("--dry-run", action="store_true", help="print the command and environment, start nothing")
    p.add_argument("--strict", action="store_true", help="refuse on warnings too; the plugin runs strict")
    p.add_argument("--format", choices=("text", "json", "vllm-config"), default="text",
                   help="with --dry-run: text (the command), json; vllm-config writes config.yaml for "
                        "'vllm serve --config' and vllm.env (to --out) and starts nothing")
    p.add_argument("--out", default=".", metavar="DIR", help="with --format vllm-config: where to write (default .)")
    p.add_argument("--inline-manifest", action="store_true",
                   help="carry the manifest itself in --additional-config (a few kB) instead of its file's path and "
                        "hash: for a command run where the launcher's cache is not (another machine); --nnodes and "
                        "vLLM's Ray executor always carry it inline")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the pre-flight (model path or hub id, platform and device count, validated vLLM version)")
    g = p.add_argument_group("several nodes (vLLM's multiprocessing multi-node form)")
    g.add_argument("--nnodes", type=int, default=1, help="number of nodes: one vllm serve per node, the same set")
    g.add_argument("--node-rank", type=int, help="with --nnodes: start this node's command (0: the head)")
    g.add_argument("--master-addr", default="127.0.0.1", help="with --nnodes: the head's address (default 127.0.0.1)")
    g.add_argument("--master-port", type=int, default=29501, help="with --nnodes: the head's port (default 29501)")
    p.add_argument("extra", nargs="*", metavar="-- VLLM_ARGS", help="extra arguments for vllm serve, after --")
    p.set_defaults(func=run)
    return p


def node_problem(args) -> str | None:
    """What is wrong with the node options (None when they are usable)."""
    if args.nnodes < 1:
        return f"--nnodes {args.nnodes}: must be at least 1"
    if args.node_rank is not None and args.nnodes == 1:
        return "--node-rank needs --nnodes N (N > 1)"
    if args.node_rank is not None and not 0 <= args.node_rank < args.nnodes:
        return f"--node-rank {args.node_rank}: must be between 0 and {args.nnodes - 1}"
    if args.nnodes > 1 and args.node_rank is None and not args.dry_run:
        return f"--nnodes {args.nnodes}: give --node-rank R to start one node's command, or --dry-run to print them"
    return None


def run(args) -> int:
    from .launch import (exec_plan, have_module, multinode_server_id, node_commands, plan_launch, preflight_problems,
                         serve_problem, vllm_config_files)

    problem = node_problem(args)
    if problem:
        return usage_error("r9kctl launch", problem)
    loaded = load_for_profile(args, "r9kctl launch")
    if loaded is None:
        return 2
    reg, sets = loaded
    # --dry-run writes the manifest and builds a tiny model too: what it prints starts the server as pasted.
    # A dry run in a core install (no torch) names the tiny model it would build instead of building it.
    dry = args.dry_run or args.format == "vllm-config"
    server = None
    if args.nnodes > 1:  # every node's separate invocation carries the same server id
        server = multinode_server_id(args.profile, args.master_addr, args.master_port)
    try:
        plan = plan_launch(reg, args.profile, tp=args.tp, sets=sets, strict=args.strict, extra_args=args.extra,
                           preflight=not args.no_preflight and not dry, build_model=not dry or have_module("torch"),
                           server=server, inline=True if args.inline_manifest or args.nnodes > 1 else None)
    except OSError as exc:  # a full, read-only or odd cache folder: one located line, not an internal error
        if isinstance(exc, fileio.FileError):  # the writer's own located line (disk full, read-only, ...)
            sys.stderr.write(exc.diagnostic.format() + "\n")
            return 2
        where = fileio.display_path(getattr(exc, "filename", None) or envvars.cache_dir())
        sys.stderr.write(f"{where}: error[cache]: cannot write the launch files (manifest, tiny model) in the "
                         f"cache folder: {exc.strerror or exc}; nothing was started (set {envvars.CACHE_DIR.name} "
                         "to a writable folder)\n")
        return 2
    if not plan.ok or (args.strict and plan.report.warnings):
        report_errors(plan.report.diagnostics, "json" if args.format == "json" else "text")
        sys.stderr.write(f"refusing to launch profile '{args.profile}'\n")
        return strict_exit_code(plan.report, args.strict, lambda: plan_launch(
            reg, args.profile, tp=args.tp, sets=sets, extra_args=args.extra, write_manifest=False,
            build_model=False, preflight=not args.no_preflight and not dry).report) if args.strict else 2
    diagnostics(group_platform_warnings(plan.report, reg)[0])
    plan.env.update(child_env(args))  # --registry / --profiles-dir: vLLM's processes load the same ones
    if dry and plan.rs is not None and not args.no_preflight:  # what a real launch would refuse, said now
        for d in preflight_problems(reg, plan.rs, plan.argv[2] if len(plan.argv) > 2 else ""):
            plan.notes.append(f"pre-flight (a launch refuses this): {d.format()}")
    if args.format == "vllm-config":
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cfg, envf = vllm_config_files(plan)
        fileio.atomic_write(out / "config.yaml", cfg, "vLLM config")
        fileio.atomic_write(out / "vllm.env", envf, "vLLM env file")
        for n in plan.notes:
            print(f"# {n}")
        print(f"wrote {out / 'config.yaml'} and {out / 'vllm.env'}; start the same server with:\n"
              f"  set -a; . {out / 'vllm.env'}; set +a; {plan.argv[0]} serve --config {out / 'config.yaml'}")
        return 0
    if args.nnodes > 1:
        plan.nodes = node_commands(plan.argv, args.nnodes, args.master_addr, args.master_port)
        if args.node_rank is not None:
            plan.argv = plan.nodes[args.node_rank]
    if args.dry_run:
        if args.format == "json":
            print_json({"argv": plan.argv, "env": masked(plan.env), "manifest": plan.manifest,
                        "notes": plan.notes, "server": plan.server, "nodes": plan.nodes,
                        "requests": [{"knob": q.knob, "sends": q.text(), "program": q.program} for q in plan.requests]})
        else:
            plan.write_env_file()
            print(plan.display())
        return 0
    problem = serve_problem()
    if problem:
        sys.stderr.write(f"r9kctl launch: cannot start vllm serve: {problem}\n")
        return 2
    for n in plan.notes:  # what the dry run prints as comments (the tiny model's random weights, ...)
        sys.stderr.write(f"r9kctl launch: {n}\n")
    exec_plan(plan)
    return 0  # not reached
