"""``r9kctl gate``: run the declared gate tests of variants and record the results in the gate ledger.

    r9kctl gate --profile tp4-default      every variant the profile moves off its stock value
    r9kctl gate router_gemm R9K_HC_MIX     the named variants (ids or knobs)
    r9kctl gate --all                      every variant that declares gate tests
    r9kctl gate --status [...]             only show the gate states (fresh / stale / missing / failed)
    r9kctl gate --pairs --profile P        pairwise composition: the CPU decode-step model with every pair of
                                           P's non-stock variants against stock; flags a pair whose difference
                                           from stock exceeds the sum of the two alone (exit status 1)

Tests run through ``python -m pytest`` in the repository root (Triton's CPU interpreter where there is no
GPU); tests marked ``gpu`` are skipped without one and reported as needing a GPU. One record per variant
goes to ``registry/gates/ledger.jsonl`` with the outcomes, the platform and a hash of the variant's sources;
the gate stays *fresh* while that hash matches. Exit status: 1 when a gate failed, 2 on usage errors.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter

from ..registry import load_registry

from .common import registry_location, tp_problem


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("gate", help="run variants' gate tests and record them in the gate ledger",
                              description=__doc__)
    p.add_argument("variants", nargs="*", metavar="VARIANT", help="variant ids or knobs")
    p.add_argument("--profile", help="gate every variant this profile sets off its stock value")
    p.add_argument("--tp", type=int, help="TP size to resolve the profile at (default: the profile's)")
    p.add_argument("--all", action="store_true", help="every variant that declares gate tests")
    p.add_argument("--status", action="store_true", help="show gate states from the ledger; run nothing")
    p.add_argument("--dry-run", action="store_true", help="show what would run")
    p.add_argument("--no-record", action="store_true", help="run, but do not write the ledger")
    p.add_argument("--timeout", type=float, help="stop the pytest run after this many seconds")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--import-junit", metavar="FILE",
                   help="record results of a pytest run elsewhere (a GPU machine without this project's tools): "
                        "a JUnit XML file written with -o junit_family=xunit1, with its provenance file; "
                        "refused unless the provenance's file hashes match this tree")
    p.add_argument("--provenance", metavar="FILE",
                   help="with --import-junit: the run's provenance (default: provenance.json beside the XML; "
                        "written there by python3 r9k/registry/provenance.py --root r9k --out FILE)")
    p.add_argument("--platform", help="with --import-junit: where it ran, checked against the provenance")
    p.add_argument("--pairs", action="store_true",
                   help="with --profile: the pairwise composition gate on the CPU decode-step model")
    p.add_argument("--config", default="tiny", help="with --pairs: the decode-step model's dimensions "
                   "(tiny, tiny-deep; default tiny)")
    p.add_argument("--seed", type=int, default=0, help="with --pairs: seed of the shared weights and inputs")
    p.add_argument("--pytest-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for pytest (repeatable), e.g. --pytest-arg=-x")
    p.set_defaults(func=run)
    return p


def _err(msg: str) -> int:
    print(f"r9kctl gate: error[gate]: {msg}", file=sys.stderr)
    return 2


def _pairs(reg, args) -> int:
    if not args.profile:
        return _err("--pairs needs --profile P")
    if args.profile not in reg.profiles:
        return _err(f"unknown profile {args.profile!r} (known: {', '.join(sorted(reg.profiles))})")
    from .decode_step.config import CONFIGS

    if args.config not in CONFIGS or args.config.startswith("flash"):
        return _err(f"--config must be one of {', '.join(c for c in CONFIGS if not c.startswith('flash'))} "
                    "(the CPU model's sizes)")
    from .evidence import pairs as PR

    out = sys.stderr if args.format == "json" else sys.stdout
    rep = PR.run_pairs(reg, args.profile, tp=args.tp, config=args.config, seed=args.seed,
                       progress=lambda m: print(m, file=out, flush=True))
    if args.format == "json":
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print(PR.render(rep))
    return 1 if rep.flagged else 0


def _state_rows(states, platform: str | None = None) -> list[str]:
    """One line per gate: its state and where the evidence came from (ran here / imported, unverified); with
    a profile's platform, the state on that platform (a platform with no record says so)."""
    width = max((len(v) for v in states), default=10)
    rows = []
    for vid, st in states.items():
        if platform:
            state, detail = st.on(platform)
            rows.append(f"  {vid:<{width}}  {state:<8} on {platform}: {detail}")
        else:
            rows.append(f"  {vid:<{width}}  {st.state:<8} {st.label()}: {st.detail}")
    return rows


def run(args) -> int:
    from ..registry import ledger as L
    from ..registry.resolve import resolve

    from .evidence import gate as G

    reg = load_registry(*registry_location(args))  # one that does not load: its located lines (cli.main)
    if args.import_junit:
        from .evidence import junit as J

        try:
            recs = J.import_junit(reg, args.import_junit, provenance=args.provenance, platform=args.platform)
        except J.ImportRefused as exc:
            print(f"{exc} (nothing recorded)", file=sys.stderr)
            return 2
        L.append_records(L.ledger_path(reg), recs)
        records, _ = L.read_ledger(L.ledger_path(reg))
        tcs = L.Toolchains(records)
        for r in recs:
            st = L.state_of(reg, reg.variants[r.variant], records, tcs)
            print(f"  {r.variant:<28} {r.result:<8} {len(r.outcomes):>4} item(s) on {r.platform}; gate now: "
                  f"{st.line()}")
        print(f"imported {len(recs)} gate record(s) from {args.import_junit} into {L.ledger_path(reg)}")
        return 1 if any(r.result == "fail" for r in recs) else 0
    if args.pairs:
        return _pairs(reg, args)
    if not (args.profile or args.variants or args.all or args.status):
        return _err("name variants, or use --profile P, --all or --status")
    problem = tp_problem(reg, args.tp, args.profile)
    if problem:
        return _err(problem)
    if args.profile and args.profile not in reg.profiles:
        return _err(f"unknown profile {args.profile!r} (known: {', '.join(sorted(reg.profiles))})")
    try:
        names = list(args.variants)
        if args.all or (args.status and not names and not args.profile):
            names += [vid for vid, v in reg.variants.items() if L.declared_tests(v)]
        plan = G.plan(reg, profile=args.profile, names=names, tp=args.tp)
    except KeyError as exc:
        return _err(f"unknown variant or knob {exc}")

    out = sys.stderr if args.format == "json" else sys.stdout
    records, problems = L.read_ledger(L.ledger_path(reg))
    for msg in problems:  # one located warning per ledger line that is not a record (skipped)
        print(msg, file=sys.stderr)

    if args.status or args.dry_run:
        states = {v.id: L.state_of(reg, v, records) for v in plan.variants}
        platform = resolve(reg, args.profile, tp=args.tp).platform if args.profile else None
        if args.format == "json":
            print(json.dumps({"states": {k: s.to_dict() for k, s in states.items()},
                              "platform": platform,
                              "on_platform": {k: dict(zip(("state", "detail"), s.on(platform)))
                                              for k, s in states.items()} if platform else None,
                              "no_gate_tests": [v.id for v in plan.no_tests],
                              "would_run": plan.test_ids if args.dry_run else None}, indent=2))
            return 0
        print(f"gate states ({L.ledger_path(reg)}){f' for {args.profile} on {platform}' if platform else ''}:",
              file=out)
        for row in _state_rows(states, platform):
            print(row, file=out)
        if args.dry_run:
            print(f"would run {len(plan.test_ids)} test id(s):", file=out)
            for t in plan.test_ids:
                print(f"  {t}", file=out)
        if plan.no_tests:
            print(f"{len(plan.no_tests)} selected variant(s) declare no gate tests: "
                  f"{', '.join(v.id for v in plan.no_tests)}", file=out)
        return 0

    if not plan.variants:
        print("nothing to run: no selected variant declares gate tests"
              + (f" ({len(plan.no_tests)} selected: {', '.join(v.id for v in plan.no_tests)})" if plan.no_tests else ""),
              file=out)
        return 0
    if importlib.util.find_spec("pytest") is None:
        return _err("pytest is not installed here, and gate tests run under it (pip install pytest); or run them "
                    "on another machine and record them with --import-junit")
    result = G.run(reg, plan, record=not args.no_record, progress=lambda m: print(m, file=out, flush=True),
                   timeout_s=args.timeout, pytest_args=args.pytest_arg)
    records, _ = L.read_ledger(L.ledger_path(reg))
    states = {v.id: L.state_of(reg, v, records) for v in plan.variants}
    failed = [r for r in result.records if r.result == "fail"]
    gpu = {r.variant: items for r in result.records
           if (items := [n for n, o in r.outcomes.items() if o == L.NEEDS_GPU])}
    if args.format == "json":
        print(json.dumps({"platform": result.platform, "records": [r.to_json() for r in result.records],
                          "states": {k: s.to_dict() for k, s in states.items()},
                          "needs_gpu": gpu, "no_gate_tests": [v.id for v in plan.no_tests],
                          "recorded": not args.no_record}, indent=2))
    else:
        print(f"\nplatform {result.platform}; pytest exit status {result.exitstatus}"
              + ("" if not args.no_record else " (not recorded)"))
        width = max(len(r.variant) for r in result.records)
        for r in result.records:
            summary = ", ".join(f"{n} {o}" for o, n in sorted(Counter(r.outcomes.values()).items()))
            print(f"  {r.variant:<{width}}  {r.result:<8} {summary:<40} gate now: {states[r.variant].state} "
                  f"({states[r.variant].label()})")
        if gpu:
            print(f"\n{sum(len(v) for v in gpu.values())} test item(s) need a GPU (skipped here; such a gate is "
                  "not complete until they pass on one):")
            for vid, items in gpu.items():  # one line per test function, parametrizations counted
                for base, count in Counter(n.split("[", 1)[0] for n in items).items():
                    print(f"  {vid}: {base}" + (f" ({count} cases)" if count > 1 else ""))
        if plan.no_tests:
            print(f"\n{len(plan.no_tests)} selected variant(s) declare no gate tests: "
                  f"{', '.join(v.id for v in plan.no_tests)}")
        if failed:
            print(f"\n{len(failed)} gate(s) FAILED: {', '.join(r.variant for r in failed)}")
            for r in failed:
                for n, o in r.outcomes.items():
                    if o not in (L.PASSED, L.SKIPPED, L.NEEDS_GPU):
                        print(f"  {r.variant}: {o} {n}")
            tail = "\n".join(result.log.strip().splitlines()[-40:])
            print(f"--- pytest output (tail) ---\n{tail}")
    return 1 if failed else 0
