"""``r9kctl bisect``: find the knob (or knobs) whose change moved a result between two profiles.

    r9kctl bisect plan --good round2-numerics --bad tp4-default --dir bisect/r3 [--dataset FILE]
    r9kctl bisect status --dir bisect/r3          classify the results so far; print the next step or the verdict
    r9kctl bisect run --dir bisect/r3 --dataset FILE --url-template http://127.0.0.1:{port} \\
        --launch "vllm serve /models/x --port {port}"      launch / record / stop each step until it concludes

By hand: launch the printed step (its manifest via ``envvars.MANIFEST``, or the printed --set list), record it with
the printed ``r9kctl eval record`` command into the bisect directory, then ask ``status`` again.
Modes, criteria and the step layout: ``r9k.r9kctl.evidence.bisect``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..registry import RegistryError, envvars, load_registry

from .cli import add_group
from .common import choice_problem, error_exit, registry_location, tp_problem, usage_error


def add_parser(subparsers) -> argparse.ArgumentParser:
    p, sub = add_group(subparsers, "bisect", "find the knob whose change moved a result between two profiles",
                       __doc__, "bisect_cmd", "{plan,status,run}")
    pl = sub.add_parser("plan", help="plan the steps between two profiles and write the bisect directory")
    pl.add_argument("--good", required=True, help="profile whose result is the reference")
    pl.add_argument("--bad", required=True, help="profile whose result moved")
    pl.add_argument("--dir", required=True, help="bisect directory to create (plan, manifests, results)")
    pl.add_argument("--tp", type=int, help="TP size to resolve both profiles at (default: the good profile's)")
    pl.add_argument("--mode", choices=("binary", "each"), default="binary")
    pl.add_argument("--criterion", choices=("mcnemar", "accuracy", "outputs"), default="mcnemar")
    pl.add_argument("--alpha", type=float, default=0.05, help="mcnemar criterion: significance level")
    pl.add_argument("--threshold", type=float,
                    help="accuracy: points of loss that count as bad (1.0); outputs: identical share below which "
                         "a step is bad (1.0)")
    pl.add_argument("--dataset", help="question set to print in the record commands")
    pl.add_argument("--format", choices=("text", "json"), default="text")
    pl.add_argument("--force", action="store_true",
                    help="replace a plan that exists in --dir (its results are moved to results.old/)")
    st = sub.add_parser("status", help="classify the recorded steps and print the next step or the verdict")
    st.add_argument("--dir", required=True)
    st.add_argument("--url", default="URL", help="server URL to print in the record command")
    st.add_argument("--format", choices=("text", "json"), default="text")
    rn = sub.add_parser("run", help="launch, record and stop each step until the search concludes")
    rn.add_argument("--dir", required=True)
    rn.add_argument("--launch", required=True,
                    help="launch command; placeholders {port} {manifest} {profile} {tp}; the step's knobs and "
                         f"{envvars.MANIFEST.name} are in its environment")
    rn.add_argument("--url-template", required=True, help="server URL with {port}, e.g. http://127.0.0.1:{port}")
    rn.add_argument("--dataset", help="question set (default: the plan's)")
    rn.add_argument("--port", type=int, default=8000)
    rn.add_argument("--ready-timeout", type=float, default=900.0, help="seconds to wait for a launch to serve")
    rn.add_argument("--max-tokens", type=int, default=512)
    rn.add_argument("--limit", type=int, help="only the first N questions of the set")
    p.set_defaults(func=run)
    return p


def _print_status(plan, st, directory, url, out=None) -> None:
    from .evidence.bisect import describe_step

    out = out if out is not None else sys.stdout  # looked up at call time: a default bound at import kept a closed stream

    for step in sorted(st.verdicts, key=lambda s: (s[0], int(s[1:]))):
        v = st.verdicts[step]
        print(f"  {step:<5} {'BAD ' if v.bad else 'good'}  {v.summary}", file=out)
    print(("verdict: " if st.done else "") + st.message, file=out)
    if st.next_step:
        print(describe_step(plan, st.next_step, directory, url), file=out)


def run(args) -> int:
    from .evidence import bisect as B
    from .evidence.results import ResultFileError

    try:
        reg = load_registry(*registry_location(args))  # --registry / --profiles-dir
        if args.bisect_cmd == "plan":
            problem = (choice_problem("--good", [args.good], sorted(reg.profiles))
                       or choice_problem("--bad", [args.bad], sorted(reg.profiles))
                       or tp_problem(reg, args.tp, args.good))
            if not problem and not 0 < args.alpha < 1:
                problem = f"--alpha {args.alpha:g}: must be between 0 and 1 (exclusive)"
            if problem:
                return usage_error("r9kctl bisect plan", problem)
            plan = B.make_plan(reg, args.good, args.bad, tp=args.tp, mode=args.mode, criterion=args.criterion,
                               alpha=args.alpha, threshold=args.threshold, dataset=args.dataset)
            if Path(args.dir, "plan.json").exists() and not args.force:
                B.write_plan(reg, plan, args.dir)  # refuses, saying why
            moved = B.set_aside_results(args.dir) if args.force else None
            B.write_plan(reg, plan, args.dir, replace=args.force)
            if moved:
                print(f"the old plan's results were moved to {moved}", file=sys.stderr)
            if args.format == "json":
                print(json.dumps(plan.to_json(), indent=2))
                return 0
            m = len(plan.groups)
            print(f"{plan.good} (good) -> {plan.bad} (bad) at TP{plan.tp}: {m} group(s) of differing knobs")
            for i, g in enumerate(plan.groups):
                print(f"  group {i:>2}: {g.label()}")
            if plan.mode == "binary":
                print(f"binary search: p0 = {plan.good}, p{m} = {plan.bad}, pK = the first K groups switched; "
                      f"about {math.ceil(math.log2(m)) if m > 1 else 0} step(s) between the two ends")
            else:
                print(f"each: g0..g{m - 1} switch one group alone ({m} steps besides the two ends)")
            for step, errs in plan.problems.items():
                print(f"warning: step {step} does not resolve cleanly: {'; '.join(errs)}")
            print(f"manifests in {args.dir}/manifests/; results go to {args.dir}/results/<step>.jsonl")
            print(B.describe_step(plan, plan.good_step, args.dir))
            return 0
        if args.bisect_cmd == "status":
            plan, st = B.status(args.dir)
            if args.format == "json":
                print(json.dumps({"done": st.done, "next_step": st.next_step, "message": st.message,
                                  "culprits": [plan.groups[i].knobs for i in st.culprits],
                                  "verdicts": {k: {"bad": v.bad, "summary": v.summary} for k, v in st.verdicts.items()}},
                                 indent=2))
            else:
                _print_status(plan, st, args.dir, args.url)
            return 0
        plan = B.load_plan(args.dir)
        dataset = args.dataset or plan.dataset
        if not dataset:
            print("r9kctl bisect run: error: --dataset is needed (the plan has none)", file=sys.stderr)
            return 2
        st = B.run_end_to_end(reg, args.dir, launch=args.launch, url_template=args.url_template, dataset=dataset,
                              port=args.port, ready_timeout_s=args.ready_timeout,
                              record_kwargs={"max_tokens": args.max_tokens, "limit": args.limit})
        plan, st = B.status(args.dir)
        _print_status(plan, st, args.dir, args.url_template)
        return 0
    except (B.BisectError, RegistryError, ResultFileError, OSError) as exc:
        return error_exit(exc, f"r9kctl bisect {args.bisect_cmd}", "bisect")
