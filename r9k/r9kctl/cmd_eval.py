"""``r9kctl eval``: paired evaluations.

``r9kctl eval compare A B``        accuracy of each, discordant counts, exact McNemar p, CI, identical outputs
                                   (``--into RELEASE_TOML --config CFG`` also appends it as a quality record)
``r9kctl eval record --url URL --dataset FILE --out FILE``
                                   ask a question set of a running OpenAI-compatible server at concurrency 1

Formats: ``r9k.r9kctl.evidence.results`` (result files) and ``r9k.r9kctl.evidence.dataset`` (question sets);
notes/evidence.md has both with examples.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .cli import add_group
from .common import error_exit


def add_parser(subparsers) -> argparse.ArgumentParser:
    p, sub = add_group(subparsers, "eval", "paired evaluations: record per-question results, compare two runs",
                       __doc__, "eval_cmd", "{compare,record}")

    c = sub.add_parser("compare", help="paired McNemar comparison of two per-question result files")
    c.add_argument("a", help="baseline result file (JSONL), e.g. the previous default")
    c.add_argument("b", help="candidate result file (JSONL)")
    c.add_argument("--format", choices=("text", "json"), default="text")
    c.add_argument("--confidence", type=float, default=0.95, help="confidence level of the intervals (0.95)")
    c.add_argument("--alpha", type=float, default=0.05,
                   help="exit 1 when p < alpha and B is worse than A (default 0.05; --no-fail: always exit 0)")
    c.add_argument("--no-fail", action="store_true", help="always exit 0 after a successful comparison")
    c.add_argument("--power", type=float, default=0.8,
                   help="power for the minimum detectable difference that is reported (default 0.8)")
    c.add_argument("--aa", action="store_true",
                   help="A/A: the two files are two runs of the same profile; report the run-to-run floor "
                        "(exit 1 when they differ significantly: the eval is not reproducible)")
    c.add_argument("--floor", metavar="A2",
                   help="a second run of A's profile: report A vs A2 (the run-to-run floor) beside A vs B")
    c.add_argument("--into", metavar="RELEASE_TOML", help="append the result as a [[quality]] record to this release TOML")
    c.add_argument("--config", help="quality record's config (fn_tp4, h200_tp4, ...); required with --into")
    c.add_argument("--eval-name", help="quality record's eval name (default: the dataset name)")
    c.add_argument("--baseline-label", help="what A is, in words (default: A's label)")
    c.add_argument("--baseline-release", help="release whose defaults A ran")
    c.add_argument("--note", help="free text for the quality record")

    r = sub.add_parser("record", help="run a question set against an OpenAI-compatible server at concurrency 1")
    r.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000 (or .../v1)")
    r.add_argument("--dataset", required=True,
                   help="question set: a JSONL file (native, GSM8K or HumanEval) or a shipped set's name (arith-smoke)")
    r.add_argument("--out", required=True, help="result file to write (JSONL)")
    r.add_argument("--model", help="model name to request (default: the first one the server lists)")
    r.add_argument("--api", choices=("chat", "completions"), default="chat")
    r.add_argument("--max-tokens", type=int, default=512)
    r.add_argument("--limit", type=int, help="only the first N questions")
    r.add_argument("--label", help="label stored in the file's header (default: the output file name)")
    r.add_argument("--resume", action="store_true", help="continue an interrupted result file")
    r.add_argument("--no-output-text", action="store_true", help="store only the hash of each output")
    r.add_argument("--execute-code", action="store_true",
                   help="allow HumanEval grading, which runs model-written code in a subprocess on this machine")
    r.add_argument("--timeout", type=float, default=600.0, help="seconds per request (600)")
    r.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)
    return p


def _compare(args) -> int:
    from .evidence import mcnemar, results

    for opt, val in (("--confidence", args.confidence), ("--alpha", args.alpha), ("--power", args.power)):
        if not 0 < val < 1:
            return error_exit(f"{opt} {val:g}: must be between 0 and 1 (exclusive)", "r9kctl eval compare", "usage")
    floor = None
    try:
        a, b = results.load(args.a), results.load(args.b)
        cmp = mcnemar.compare(a, b, confidence=args.confidence, alpha=args.alpha, power=args.power)
        if args.floor:
            floor = mcnemar.compare(a, results.load(args.floor), confidence=args.confidence, alpha=args.alpha,
                                    power=args.power)
    except (results.ResultFileError, ValueError) as exc:
        return error_exit(exc, "r9kctl eval compare", "result-file")
    for pair in [cmp] * bool(args.aa) + [floor] * bool(floor):
        why = mcnemar.aa_problem(pair)
        if why:
            return error_exit(why, "r9kctl eval compare", "aa")
    if args.aa and args.into:
        return error_exit("--aa compares two runs of one profile: nothing to record with --into",
                          "r9kctl eval compare", "usage")
    if args.into:
        from .evidence import quality

        if not args.config:
            print("r9kctl eval compare: error: --into needs --config (the configuration the eval ran on)",
                  file=sys.stderr)
            return 2
        rec = quality.quality_record(cmp, config=args.config, eval_name=args.eval_name,
                                     baseline_label=args.baseline_label, baseline_release=args.baseline_release,
                                     source=f"r9kctl eval compare {args.a} {args.b}", note=args.note)
        try:
            quality.append_quality_record(args.into, rec)
        except (OSError, ValueError) as exc:
            return error_exit(exc, "r9kctl eval compare --into", "quality")
    if args.format == "json":
        d = cmp.to_dict()
        d["discordance_ci"] = list(mcnemar.discordance_ci(cmp.n, cmp.b + cmp.c, cmp.confidence))
        d["verdict_basis"] = cmp.verdict_basis(args.alpha)
        if args.aa:
            d["mode"] = "aa"
        if floor is not None:
            d["floor"] = floor.to_dict()
            d["floor"]["discordance_ci"] = list(mcnemar.discordance_ci(floor.n, floor.b + floor.c, floor.confidence))
        print(json.dumps(d, indent=2))
    else:
        print(cmp.format_text())
        if args.aa:
            print(mcnemar.floor_text(cmp))
            verdict = ("the two runs of one profile differ significantly: this eval is not reproducible"
                       if cmp.significant(args.alpha) else
                       "no significant run-to-run difference; a comparison against another profile at this n "
                       "must move more than the floor above")
        else:
            if floor is not None:
                print(mcnemar.floor_text(floor, "floor (A/A2)"))
                print(mcnemar.floor_text(cmp, "A/B"))
            worse = cmp.significant(args.alpha) and cmp.c < cmp.b
            verdict = ("B is significantly worse" if worse else
                       "B is significantly better" if cmp.significant(args.alpha) else "no detectable difference")
            if floor is not None and not cmp.significant(args.alpha) and cmp.b + cmp.c <= floor.b + floor.c:
                verdict += " (A/B discordance within the run-to-run floor)"
        print(f"verdict        {verdict} at alpha = {args.alpha:g}")
        print(f"               ({cmp.verdict_basis(args.alpha)})")
        if args.into:
            print(f"quality record appended to {args.into}")
    if args.aa:
        return 1 if (not args.no_fail and cmp.significant(args.alpha)) else 0
    if not args.no_fail and cmp.significant(args.alpha) and cmp.c < cmp.b:
        return 1
    return 0


def _record(args) -> int:
    from .evidence import dataset as D, record as R, results

    try:
        ds = D.load_dataset(args.dataset)
        if any(q.grader == "humaneval" for q in ds.questions) and not args.execute_code:
            raise D.DatasetError(f"{args.dataset} is graded by running model-written code; pass --execute-code")
        out = R.record(ds, args.url, args.out, model=args.model, max_tokens=args.max_tokens, api=args.api,
                       label=args.label, limit=args.limit, resume=args.resume, execute_code=args.execute_code,
                       api_key=os.environ.get("OPENAI_API_KEY"), timeout_s=args.timeout,
                       keep_output=not args.no_output_text, progress=None if args.quiet else sys.stderr)
    except (D.DatasetError, R.ServerError, results.ResultFileError, OSError, ValueError) as exc:
        return error_exit(exc, "r9kctl eval record", "eval")  # ValueError: a bad URL
    rf = results.load(out)
    print(f"{out}: {rf.correct}/{rf.n} correct ({100 * rf.accuracy:.2f}%), dataset {ds.name} "
          f"sha256 {ds.sha256()[:12]}")
    return 0


def run(args) -> int:
    if args.eval_cmd == "compare":
        return _compare(args)
    return _record(args)
