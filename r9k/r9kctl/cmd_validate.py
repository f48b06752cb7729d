"""``r9kctl validate``: schema, then references and semantics, then each profile's launch against the vLLM
interface description (its flags and variables, abbreviations off), with located messages.

Exit codes (one rule for validate and launch): 0 valid; 1 valid without --strict but refused by it (warnings,
and the warnings --strict turns into errors); 2 invalid (errors without --strict); 3 a bug.
"""
from __future__ import annotations

import re

from ..registry import RegistryError, load_registry
from ..registry.errors import Diagnostic

from .common import add_set_option, parse_sets, registry_location, report_errors, tp_problem, usage_error
from .output import diagnostics, print_json


def add_parser(sub):
    p = sub.add_parser("validate", help="validate the registry and a profile (or all profiles)", description=__doc__)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--profile", "-p", help="the profile to validate (r9kctl profiles lists them)")
    g.add_argument("--all", action="store_true", help="every profile")
    p.add_argument("--tp", type=int, help="validate at this tensor-parallel size instead of the profile's")
    add_set_option(p)
    p.add_argument("--strict", action="store_true",
                   help="warnings fail (exit 1 when the input is otherwise valid); undeclared R9K_ variables are errors")
    p.add_argument("--vllm-version", metavar="X.Y",
                   help="check launches against this vLLM's interface description (default: the installed vLLM's)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json (scripts)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..registry.availability import summary_line
    from ..registry.memory import fmt_bytes
    from ..registry.validate import Report, validate

    sets, errs = parse_sets(args.sets, getattr(args, "argv", None))
    if errs:
        report_errors(errs, args.format)
        return 2
    try:  # the registry and profiles the global options name (--registry, --profiles-dir)
        reg = load_registry(*registry_location(args),
                            only_profiles=[args.profile] if args.profile and not args.all else None)
    except RegistryError as exc:  # schema errors: reported like validate's phase 1
        reg, report = None, Report()
        for d in exc.diagnostics:
            report.add(d)
    if reg is not None:
        problem = tp_problem(reg, args.tp, args.profile if not args.all else None)
        if problem:
            return usage_error("r9kctl validate", problem, args, "--tp")
        report = validate(reg, profile=args.profile, all_profiles=args.all, tp=args.tp, sets=sets,
                          strict=args.strict, vllm_version=args.vllm_version)
    code = strict_exit_code(report, args.strict, lambda: validate(
        reg, profile=args.profile, all_profiles=args.all, tp=args.tp, sets=sets, vllm_version=args.vllm_version)
        if reg is not None else report)
    if args.format == "json":
        d = report.to_dict()
        d["exit_code"] = code
        print_json(d)
        return code
    shown, platforms = group_platform_warnings(report, reg)
    diagnostics(shown)
    for name, rs in report.profiles.items():
        b = report.budgets.get(name)
        line = f"{name}: tp{rs.tp} {rs.model or '-'} hash {rs.hash}, {len(rs.active())} active"
        if b:
            line += f", KV cache {b.kv_tokens:,} tokens " + (f"({fmt_bytes(b.kv_bytes)})" if b.kv_bytes >= 0 else
                                                              f"(does not fit: {fmt_bytes(-b.kv_bytes)} short)")
            for c in b.costs:
                line += f"; {c.knob} {'costs' if c.bytes > 0 else 'frees'} {fmt_bytes(abs(c.bytes))} = {abs(c.tokens):,} tokens"
        print(line)
        decisions = report.availability.get(name)
        if decisions is not None:
            print(f"  {name}: {summary_line(decisions)}")
            for v in decisions.values():
                if v.state == "fallback" and not args.all:  # --all: the grouped line above says why
                    print(f"    falls back: {v.knob}={v.value}: {v.reason}")
        if report.gates.get(name):
            print(f"  {name}: {report.gates[name]}")
    n_err, n_warn = len(report.errors), len(report.warnings)
    status = "ok" if code == 0 else "failed"
    print(f"{status}: {n_err} error(s), {n_warn} warning(s)")
    return code


def kernel_platforms(reg) -> list[str]:
    """The platforms this project's kernels have an implementation for (every variant's, from the registry)."""
    return sorted({p for v in (reg.variants.values() if reg is not None else ()) for p in v.implementation.platforms})


def group_platform_warnings(report, reg) -> tuple[list, list[str]]:
    """The diagnostics to print, with the "cannot run here: no implementation for platform P" warnings (one per
    variant and profile: one cause, the platform) of several profiles folded into one line per platform that says
    what is expected here (one profile: each kept at its line, and that line added as an info); returns
    (diagnostics, platforms folded)."""
    by_platform: dict[str, list] = {}
    rest = []
    for d in report.diagnostics:
        m = re.search(r"no implementation for platform '([^']+)'", d.message) if d.code == "no-implementation" else None
        if m and d.level == "warning":
            by_platform.setdefault(m.group(1), []).append(d)
        else:
            rest.append(d)
    if not by_platform:
        return list(report.diagnostics), []
    label = {"triton-interpret": "the Triton interpreter (triton-interpret, any CPU)"}
    runs = [label.get(p, p) for p in kernel_platforms(reg)]
    if len(report.profiles) <= 1:  # one profile: each value at its own line, and one line on their cause
        return list(report.diagnostics) + [
            Diagnostic("info", "no-implementation",
                       f"{len(ds)} warning(s) say \"no implementation for platform '{plat}'\", all for one reason: this "
                       f"project's kernels run on {' and '.join(runs) or 'no platform'}, not on the '{plat}' machine "
                       "the profile describes (the original deployment's); there the plugin keeps vLLM's own path")
            for plat, ds in sorted(by_platform.items())], []
    for plat, ds in sorted(by_platform.items()):
        profiles = sorted({d.items[-1] for d in ds if d.items})
        knobs = sorted({d.message.split("=", 1)[0] for d in ds})
        rest.append(Diagnostic("warning", "no-implementation",
                               f"{len(knobs)} variants set by {len(profiles)} profile(s) ({', '.join(profiles)}) have no "
                               f"implementation for platform '{plat}': the plugin keeps vLLM's own path for each. Expected "
                               f"here: this project's kernels run on {' and '.join(runs) or 'no platform'}, not on the "
                               f"'{plat}' machine these profiles describe (the original deployment's); "
                               f"`r9kctl validate -p PROFILE` lists each"))
    return rest, sorted(by_platform)


def strict_exit_code(report, strict: bool, lenient) -> int:
    """The exit-code rule: 2 when the input is invalid, 1 when only --strict refuses it, 0 when valid.
    ``lenient()`` gives the same check without --strict (run only when strict found errors: strictness turns
    some warnings into errors at their source)."""
    code = report.exit_code(strict)
    if strict and code == 2 and not lenient().errors:
        return 1
    return code
