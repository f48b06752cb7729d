"""``r9kctl bench decode-step``: the Flash-Next TP4-rank decode model per profile (``r9k.r9kctl.decode_step``):
agreement checks, one MTP-3 step in a CUDA graph (ms, graph and kernel nodes, ratios), ``--ablate``;
``--export-plan`` / ``--result`` split it across machines. ``r9kctl bench serve``: paired serving benchmark of
profiles (r9k.r9kctl.evidence.serve_bench).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..registry import RegistryError, fileio, load_registry

from .common import load_with_sets, registry_location, report_errors, usage_error
from .evidence import serve_bench as SB


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
    sv = bsub.add_parser("serve", help="paired serving benchmark of profiles (r9kctl launch + vllm bench serve)",
                         description=SB.__doc__ or "")
    sv.add_argument("--profiles", required=True, help="comma-separated profiles; the first is the baseline")
    sv.add_argument("--concurrency", default="1,4", help="comma-separated client concurrencies (default 1,4)")
    sv.add_argument("--repeats", type=int, default=3, help="interleaved rounds A B, A B, ...: each starts every profile once, in turn (default 3)")
    sv.add_argument("--num-prompts", type=int, default=32)
    sv.add_argument("--input-len", type=int, default=128, help="random prompt length in tokens (default 128)")
    sv.add_argument("--output-len", type=int, default=64, help="tokens generated per request (default 64)")
    sv.add_argument("--warmups", type=int, default=1, help="warm-up requests before each run (default 1)")
    sv.add_argument("--port", type=int, default=18300)
    sv.add_argument("--seed", type=int, default=0, help="prompt seed of repeat 0 (repeat r: seed + r)")
    sv.add_argument("--out", default="bench-serve", help="folder for vLLM's result files and logs (bench-serve)")
    sv.add_argument("--plot", metavar="FILE.png", help="write a PNG plot (needs matplotlib)")
    sv.add_argument("--start-timeout", type=float, default=900.0, help="seconds to wait for a server (900)")
    sv.add_argument("--format", choices=("table", "json"), default="table")
    sv.add_argument("--release-records", action="store_true", help="print the figures as release [[bench]] records")
    sv.add_argument("--config", dest="record_config", help="with --release-records: the records' config "
                    "(e.g. fn_tp4); default <model>_tp<N> of the first profile")
    sv.add_argument("--platform", default=None, help="with --release-records: the records' platform (default: "
                    "the first profile's)")
    sv.add_argument("extra", nargs="*", metavar="-- VLLM_ARGS", help="extra arguments for every vllm serve, after --")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    if getattr(args, "bench_what", None) == "serve":
        return _serve(args)
    if getattr(args, "bench_what", None) != "decode-step":
        return usage_error("r9kctl bench", "name what to benchmark: r9kctl bench decode-step --profile P "
                           "[--against Q] ... | r9kctl bench serve --profiles A,B ...")
    if args.result:
        res = fileio.read_json(args.result, "decode-step result", expect=dict)
        try:
            return _show(res, args)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
            raise fileio.error(args.result, "result-file", f"not a decode-step result ({what})", 1, 1) from None
    problem = _option_problem(args)
    if problem:
        return usage_error("r9kctl bench decode-step", problem)
    loaded = load_with_sets(args)
    if loaded is None:
        return 2
    reg, sets = loaded
    requests = [int(x) for x in args.requests.split(",") if x.strip()]
    from .decode_step.run import build_plan

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
               "export the plan (--export-plan FILE) and run `python -m r9k.r9kctl.decode_step.run --plan FILE` "
               "there; --config tiny runs the tiny model on the CPU (Triton interpreter).")
        if args.format == "json":
            print(json.dumps({"skipped": True, "reason": msg}))
        print(f"r9kctl bench decode-step: error[no-gpu]: {msg}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from .decode_step.run import run_plan

    choosers = None
    if args.dispatch == "plugin":
        from .decode_step.dispatch import plugin_chooser
        from ..registry.resolve import resolve

        choosers = {n: plugin_chooser(resolve(reg, e["profile"], sets=sets), stock=e["stock"])
                    for n, e in plan["profiles"].items()}
    res = run_plan(plan, log=lambda s: print(s, file=sys.stderr, flush=True), choosers=choosers)
    return _show(res, args)


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


def _show(res, args) -> int:
    from .decode_step.report import records_toml, release_records, render

    if args.release_records:
        cmd = args.bench_command or "r9kctl bench decode-step " + " ".join(sys.argv[3:])
        print(records_toml(release_records(res, cmd)))
    elif args.format == "json":
        print(json.dumps(res, indent=1))
    else:
        print(render(res))
    return 0 if res.get("ok") else 1


def _serve(args) -> int:
    from ..registry.resolve import resolve
    from .launch import plan_launch, serve_problem

    def usage(msg: str) -> int:
        return usage_error("r9kctl bench serve", msg)

    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    try:
        conc = [int(x) for x in args.concurrency.split(",") if x.strip()]
    except ValueError:
        return usage(f"--concurrency {args.concurrency!r} is not a comma-separated list of integers")
    if not profiles:
        return usage("--profiles: name one or more profiles")
    if len(set(profiles)) != len(profiles):
        return usage(f"--profiles {args.profiles!r} names a profile twice (its A/A floor comes from the baseline's own rounds: --repeats)")
    if not conc or min(conc) < 1:
        return usage(f"--concurrency {args.concurrency!r}: give one or more concurrencies of at least 1")
    for opt, v in (("--repeats", args.repeats), ("--num-prompts", args.num_prompts), ("--input-len", args.input_len),
                   ("--output-len", args.output_len)):
        if v < 1:
            return usage(f"{opt} {v}: must be at least 1")
    try:
        reg = load_registry(*registry_location(args))  # --registry / --profiles-dir
    except RegistryError as exc:
        report_errors(exc.diagnostics, "table")
        return 2
    # Every profile is validated before anything starts: a bad one stops the run here.
    for p in profiles:
        if p not in reg.profiles:
            return usage(f"unknown profile {p!r} (known: {', '.join(sorted(reg.profiles))}); nothing launched")
        plan = plan_launch(reg, p, write_manifest=False, build_model=False)
        if not plan.ok:
            report_errors(plan.report.diagnostics, "table")
            print(f"r9kctl bench serve: profile '{p}' fails validation; nothing launched", file=sys.stderr)
            return 2
    problem = serve_problem()
    if problem:
        print(f"r9kctl bench serve: error[vllm]: {problem}; nothing launched", file=sys.stderr)
        return 2
    s = SB.BenchSettings(concurrency=conc, repeats=args.repeats, num_prompts=args.num_prompts,
                         input_len=args.input_len, output_len=args.output_len, warmups=args.warmups, port=args.port,
                         start_timeout_s=args.start_timeout, seed=args.seed, serve_args=list(args.extra))
    say = (lambda m: print(m, file=sys.stderr, flush=True))
    try:
        ms = SB.run(profiles, s, Path(args.out), say=say)
    except SB.BenchError as exc:
        print(f"r9kctl bench serve: error[bench]: {exc}", file=sys.stderr)
        return 1
    summary = SB.summarize(ms, profiles)
    summary["settings"] = s.__dict__
    fileio.atomic_write(Path(args.out) / "summary.json", json.dumps(summary, indent=1), "summary")
    if args.plot:
        why = SB.plot(summary, Path(args.plot))
        say(f"plot: {args.plot}" if why is None else f"no plot: {why}")
    if args.release_records:
        rs = resolve(reg, profiles[0])
        config = args.record_config or f"{rs.model}_tp{rs.tp}"
        platform = args.platform or getattr(reg.profiles[profiles[0]], "platform", None) or "unknown"
        cmd = "r9kctl bench serve " + " ".join(sys.argv[3:])
        print(SB.records_toml(SB.release_records(summary, config, platform, cmd, s)))
    elif args.format == "json":
        print(json.dumps(summary, indent=1))
    else:
        print(SB.render(summary, s))
    return 0
