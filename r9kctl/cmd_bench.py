"""``r9kctl bench decode-step --profile P [--against Q] [--requests 1,2,4] [--context N] [--ablate]``.

Builds the Flash-Next TP4-rank decode model (``r9k.kernels.decode_step``) for each profile, checks that the
step outputs agree, captures one MTP-3 decode step in a CUDA graph and prints ms per step, graph nodes,
kernel nodes and the ratio between the profiles; ``--ablate`` turns each non-stock variant of the profile
back to stock one at a time. Without a GPU it says so and exits 2 (``--config tiny`` runs on the CPU).

``--export-plan FILE`` writes the resolved plan as JSON instead of running it (for a machine without the
registry's dependencies: ``python -m r9k.kernels.decode_step.bench --plan FILE``); ``--result FILE`` prints a
result written by such a run; ``--release-records`` prints it as ``[[bench]]`` records for a release file.
"""
from __future__ import annotations

import json
import sys


def add_parser(sub):
    p = sub.add_parser("bench", help="benchmarks: the whole decode step per profile (bench decode-step)")
    bsub = p.add_subparsers(dest="bench_what", metavar="WHAT")
    d = bsub.add_parser("decode-step", help="one CUDA-graph decode step of the Flash-Next TP4 rank, per profile")
    d.add_argument("--profile", "-p", default="tp4-default")
    d.add_argument("--against", "-a", default="stock",
                   help="baselines, comma-separated ('' for none; default stock): a profile, whose stock paths run "
                        "vLLM's own kernels (P@vllm, the default; 'vllm' = stock@vllm) or the op table's plain "
                        "compositions (P@plain)")
    d.add_argument("--requests", default="1,2,4", help="comma-separated request counts (4 tokens each)")
    d.add_argument("--context", type=int, default=4096, help="context length in tokens (multiple of 16)")
    d.add_argument("--ablate", action="store_true", help="each non-stock variant back to stock, one at a time")
    d.add_argument("--ablate-requests", type=int, help="request count of the ablation (default: the first)")
    d.add_argument("--replays", type=int, default=50)
    d.add_argument("--config", default="flash-next-tp4", choices=("flash-next-tp4", "tiny", "tiny-deep"),
                   help="model dimensions: the Flash-Next TP4 rank (GPU), or tiny ones that run on the CPU")
    d.add_argument("--set", dest="sets", action="append", metavar="KNOB=VALUE", help="override a knob (both profiles)")
    d.add_argument("--dispatch", choices=("values", "plugin"), default="values",
                   help="how ops are chosen: the manifest values with the plugin's rule (default), or the plugin's "
                        "DispatchTable itself (it keeps the stock path for ops it has no vLLM adapter for)")
    d.add_argument("--format", choices=("table", "json"), default="table")
    d.add_argument("--export-plan", metavar="FILE", help="write the plan JSON and stop")
    d.add_argument("--result", metavar="FILE", help="print a result JSON written by a run elsewhere")
    d.add_argument("--release-records", action="store_true", help="print the result as release [[bench]] records")
    d.add_argument("--command", dest="bench_command", help="the command to record with --release-records")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    if getattr(args, "bench_what", None) != "decode-step":
        print("r9kctl bench: error[usage]: name what to benchmark: r9kctl bench decode-step --profile P "
              "[--against Q] ...", file=sys.stderr)
        return 2
    from r9k.kernels.decode_step.report import records_toml, release_records, render

    from r9k.registry import fileio

    if args.result:
        res = fileio.read_json(args.result, "decode-step result", expect=dict)
        try:
            return _show(res, args, render, release_records, records_toml)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
            raise fileio.error(args.result, "result-file", f"not a decode-step result ({what})", 1, 1) from None
    problem = _option_problem(args)
    if problem:
        print(f"r9kctl bench decode-step: error[usage]: {problem}", file=sys.stderr)
        return 2

    from .common import load_with_sets, report_errors

    loaded = load_with_sets(args)
    if loaded is None:
        return 2
    reg, sets = loaded
    requests = [int(x) for x in args.requests.split(",") if x.strip()]
    from r9k.kernels.decode_step.plan import build_plan

    try:
        plan, diags = build_plan(reg, args.profile, args.against or None, requests, args.context, args.ablate,
                                 config=args.config, replays=args.replays, ablate_requests=args.ablate_requests,
                                 sets=sets)
    except ValueError as exc:
        print(f"error[bad-baseline]: --against: {exc}", file=sys.stderr)
        return 2
    if diags:
        report_errors(diags, args.format)
        return 2
    if args.export_plan:
        fileio.atomic_write(args.export_plan, json.dumps(plan, indent=1), "plan file")
        print(f"wrote {args.export_plan}: {args.profile}" + (f" against {args.against}" if args.against else ""))
        return 0
    try:
        import torch
    except ImportError:
        print("r9kctl bench decode-step: error[no-torch]: PyTorch is not installed here; export the plan "
              "(--export-plan FILE) and run it where it is", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() and not args.config.startswith("tiny"):
        msg = ("no CUDA GPU on this machine: the decode-step benchmark needs one. Run it on a GPU machine, or "
               "export the plan (--export-plan FILE) and run `python -m r9k.kernels.decode_step.bench --plan FILE` "
               "there; --config tiny runs the tiny model on the CPU (Triton interpreter).")
        if args.format == "json":
            print(json.dumps({"skipped": True, "reason": msg}))
        print(f"r9kctl bench decode-step: error[no-gpu]: {msg}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        import os

        os.environ.setdefault("TRITON_INTERPRET", "1")
    from r9k.kernels.decode_step.bench import run_plan

    choosers = None
    if args.dispatch == "plugin":
        from r9k.kernels.decode_step.dispatch import plugin_chooser
        from r9k.registry.resolve import resolve

        choosers = {n: plugin_chooser(resolve(reg, e["profile"], sets=sets), stock=e["stock"])
                    for n, e in plan["profiles"].items()}
    res = run_plan(plan, log=lambda s: print(s, file=sys.stderr, flush=True), choosers=choosers)
    return _show(res, args, render, release_records, records_toml)


def _option_problem(args) -> str | None:
    """What is wrong with the numeric options (None when they are usable)."""
    try:
        requests = [int(x) for x in args.requests.split(",") if x.strip()]
    except ValueError:
        return f"--requests {args.requests!r} is not a comma-separated list of integers"
    if not requests or any(r < 1 for r in requests):
        return f"--requests {args.requests!r}: give one or more request counts of at least 1"
    if args.context < 16 or args.context % 16:
        return f"--context {args.context}: must be a positive multiple of 16"
    if args.replays < 1:
        return f"--replays {args.replays}: must be at least 1"
    if args.ablate_requests is not None and args.ablate_requests not in requests:
        return f"--ablate-requests {args.ablate_requests}: must be one of --requests ({args.requests})"
    return None


def _show(res, args, render, release_records, records_toml) -> int:
    if args.release_records:
        cmd = args.bench_command or "r9kctl bench decode-step " + " ".join(sys.argv[3:])
        print(records_toml(release_records(res, cmd)))
    elif args.format == "json":
        print(json.dumps(res, indent=1))
    else:
        print(render(res))
    return 0 if res.get("ok") else 1
