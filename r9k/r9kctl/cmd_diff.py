"""``r9kctl diff A B``: two releases or profiles, field by field, with their numbers side by side, laid out as
the release notes lay them out (per configuration, each figure with how it was measured, ranges kept as
ranges, the reference stack's column with the ratio, the quality gate with all its counts)."""
from __future__ import annotations

import re

from .common import fail, load, report_errors
from .output import heading, print_json, table

LABELS = {
    "decode_step_ms": "decode step",
    "single_stream_tok_s": "single-stream decode",
    "betterbench_decode_tok_s": "decode (BetterBench combined)",
    "betterbench_step_p50_ms": "decode step p50",
    "ttft_p50_ms": "time to first token p50",
    "ttft_ms": "time to first token",
    "kv_cache_tokens": "KV cache",
    "update_p99_ms": "update p99",
    "graph_nodes_per_step": "HIP-graph nodes a decode step",
    "graph_node_dispatch_us": "dispatch a graph node",
    "gdn_core_graph_nodes_per_layer": "GDN spec-decode core, graph nodes a layer",
    "shared_expert_launches": "shared expert, launches",
    "launches_per_step": "launches a step",
    "vs_reference_pct": "against the reference stack",
    "mtp_acceptance": "MTP acceptance",
}
METHODS = {
    "probe": "probe",
    "betterbench": "BetterBench",
    "release-table": "release table",
    "step-script": "512-token essay (~/tp4tune.sh)",
    "startup": "vLLM startup",
    "client": "client",
    "launcher-header": "launcher header",
    "r9kctl-bench": "r9kctl bench",
    "notes": "notes",
    "kernel": "kernel",
}
CONFIGS = {"fn_tp4": "Flash-Next TP4", "fn_tp2": "Flash-Next TP2 (experts in host RAM)", "27b_tp2": "27B TP2"}
NO_VALUE = "-"


def label(metric: str) -> str:
    base, _, sub = metric.partition("@")
    if base in LABELS:
        text = LABELS[base]
    elif base == "concurrency_tok_s":
        text = f"{sub.lstrip('c')} concurrent" if sub else "concurrency"
        sub = ""
    elif base == "prefill_tok_s":
        text = f"{sub} prefill" if sub else "prefill"
        sub = ""
    else:
        text = base.replace("_", " ")
    return f"{text} {sub}".strip()


def family_label(base: str, subs: list[str]) -> str:
    """'prefill 2k / 8k / 16k / 32k', 'concurrency 1 / 2 / 4 / 8 / 16' (the notes' row names)."""
    if base == "concurrency_tok_s":
        return "concurrency " + " / ".join(s.lstrip("c") for s in subs)
    if base == "prefill_tok_s":
        return "prefill " + " / ".join(subs)
    return f"{label(base)} " + " / ".join(subs)


def method_label(m) -> str:
    return METHODS.get(m, m or "")


def config_label(cfg: str, setting=None) -> str:
    text = CONFIGS.get(cfg, cfg)
    return f"{text}, {setting}" if setting else text


def cell(shown, alts) -> str:
    """A figure, with the other source's differing figure of the same row beside it."""
    from ..registry.diff import figure_text

    s = figure_text(shown)
    if shown is not None and alts:
        other = "reference" if shown.origin == "seed" else "seed"
        s += " [" + other + ": " + ", ".join(figure_text(r) for r in alts) + "]"
    return s


def row_label(r) -> str:
    text = label(r.metric) + (f" ({r.unit})" if r.unit and r.unit not in ("%",) else "")
    if r.launch:
        text += f", {r.launch} launch"
    return text


def _note(row) -> str:
    """A row's note, or 'A only' / 'B only' for a figure one side lacks; '' otherwise."""
    return row.note or (f"{row.only} only" if row.only else "")


def fmt_delta(row) -> str:
    if _note(row):
        return _note(row)
    if row.delta is None:
        return NO_VALUE
    pct = f" ({row.pct:+.1f}%)" if row.pct is not None else ""
    return f"{row.delta:+,.2f}".rstrip("0").rstrip(".") + pct


def pct_change(row) -> str:
    return _note(row) or (f"{row.pct:+.1f}%" if row.pct is not None else NO_VALUE)


def ratio_text(pcts: list[float], ratios: list[float], lower_is_better: bool) -> str:
    """'+19%', '+18-29%', '-18% (1.2x faster)' like the notes' third column."""
    if not pcts:
        return NO_VALUE
    lo, hi = round(min(pcts)), round(max(pcts))
    s = f"{lo:+d}%" if lo == hi else (f"{lo:+d}-{hi}%" if lo >= 0 else f"{lo:+d} to {hi:+d}%")
    if lower_is_better and ratios and all(r < 1 for r in ratios):
        speed = [1 / r for r in ratios]
        a, b = min(speed), max(speed)
        s += f" ({a:.1f}x faster)" if round(a, 1) == round(b, 1) else f" ({a:.1f}-{b:.1f}x faster)"
    return s


def vs_reference_rows(items) -> list[list[str]]:
    """The reference-stack comparison of one release, a row a metric (a family of depths or concurrencies in one
    row, as the notes write it): [metric, source, ours, reference, ours vs reference]."""
    from ..registry.diff import figure_text

    rows, fam = [], {}
    for v in items:
        base, _, sub = v.metric.partition("@")
        fam.setdefault((v.config, base, v.method), []).append((sub, v))
    for (cfg, base, method), group in fam.items():
        vs = [v for _, v in group]
        pcts = [v.pct for v in vs if v.pct is not None]
        ratios = [v.ratio for v in vs if v.ratio is not None]
        name = family_label(base, [s for s, _ in group]) if group[0][0] else label(base)
        unit = vs[0].unit
        rows.append([f"{name} ({unit})" if unit and unit != "%" else name, method_label(method),
                     " / ".join(figure_text(v.ours) for v in vs), " / ".join(figure_text(v.reference) for v in vs),
                     ratio_text(pcts, ratios, vs[0].lower_is_better)])
    return rows


def quality_text(q) -> str:
    r = q.record or q.a_record
    bits = []
    if r is not None and r.mcnemar is not None:
        vs = f" (vs {r.mcnemar.vs})" if r.mcnemar.vs else ""
        bits.append(f"{r.mcnemar.b} vs {r.mcnemar.c} discordant, McNemar p = {r.mcnemar.p:.2f}{vs}")
    if r is not None and r.identical_outputs_pct is not None:
        bits.append(f"outputs identical on {r.identical_outputs_pct:g}% of questions")
    if r is not None and r.other_range_pct:
        lo, hi = r.other_range_pct
        bits.append(f"{r.other_label or 'another run'}: {lo:.1f}-{hi:.1f}%")
    return "; ".join(bits) or NO_VALUE


def pct_text(p, n) -> str:
    if p is None:
        return NO_VALUE
    return f"{p:.2f}%" + (f" ({n:,})" if n is not None else "")


def eval_label(q) -> str:
    name = {"gsm8k": "GSM8K", "gsm8k-cot-800": "GSM8K chain-of-thought"}.get(q.eval, q.eval)
    return f"{name} ({q.total:,} questions)" if q.total else name


def quality_rows(q) -> list[list[str]]:
    """[which, GSM8K, HumanEval, sanity] for the A and B rows of one quality comparison."""
    def he(n):
        return f"{n} / {q.humaneval_total}" if n is not None and q.humaneval_total else NO_VALUE

    rows = []
    if q.only != (q.b_label and q.b_label.split()[0]) or q.a_pct is not None:
        if q.a_label or q.a_pct is not None:
            rows.append([q.a_label or "baseline", pct_text(q.a_pct, q.a_correct), he(q.a_humaneval),
                         q.a_sanity or NO_VALUE])
    if q.b_label:
        rows.append([q.b_label, pct_text(q.b_pct, q.b_correct), he(q.b_humaneval), q.b_sanity or NO_VALUE])
    if not rows and q.a_record is not None:
        rows.append([q.a_label or "", pct_text(q.a_pct, q.a_correct), he(q.a_humaneval), q.a_sanity or NO_VALUE])
    for r, rec in ((rows[:1], q.a_record), (rows[-1:], q.record)):
        if r and r[0][1] == NO_VALUE and rec is not None and rec.text:
            r[0][1] = rec.text  # the notes' words where they give no single figure ('gsm8k 94.4-95.5%; ...')
    return rows


def side_names(d, A: str, B: str) -> tuple[str, str]:
    """Column names for release numbers: the releases (a profile's numbers are its base release's)."""
    return d.rel_a or A, d.rel_b or B


def value_text(v) -> str:
    """A knob's value: '-' where it has none (the knob did not exist), '(empty)' where it is set empty."""
    if v is None:
        return NO_VALUE
    return "(empty)" if v == "" else str(v)


def add_parser(sub):
    p = sub.add_parser("diff", help="compare two releases or profiles (values, per-TP defaults, numbers)")
    p.add_argument("a", help="release (v0.3.0) or profile (tp4-default)")
    p.add_argument("b", help="the release or profile to compare A with (the second column)")
    p.add_argument("--tp", type=int, help="only this TP size")
    p.add_argument("--format", choices=("table", "json", "markdown"), default="table",
                   help="table (default), json, or markdown (for notes and release pages)")
    p.add_argument("--all-numbers", action="store_true",
                   help="also the figures no notes of A or B state (launcher headers, PROGRESS.md, later notes)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from ..registry.diff import diff, parse_side
    from ..registry.resolve import resolve, suggest

    reg = load(args, [s for s in (args.a, args.b) if not re.match(r"(release:)?v\d", s)])  # only the profiles named
    for spec in (args.a, args.b):
        if spec in reg.profiles or spec in reg.profile_problems:  # an invalid profile: its errors, not a diff
            rs = resolve(reg, spec, tp=args.tp, env={})
            if not rs.ok:
                report_errors(rs.diagnostics, args.format)
                return 2
        try:
            parse_side(reg, spec)
        except KeyError:
            hint = suggest(spec, list(reg.releases) + list(reg.profiles))
            return fail(f"'{spec}' is neither a release nor a profile" + (f" ({hint})" if hint else ""),
                        "unknown-side")
    d = diff(reg, args.a, args.b, tp=args.tp, all_numbers=args.all_numbers)
    if args.format == "json":
        print_json(d.to_dict())
        return 0
    A, B = args.a, args.b
    if args.format == "markdown":
        print(render_markdown(reg, d, A, B))
        return 0
    if d.headline:
        heading(f"{B}: {d.headline}")
    for rel, proj in d.projects.items():
        heading(f"{rel} is a release of {proj} (this project), not of the original stack; it extends "
                f"{reg.releases[rel].previous}")
    if d.added or d.removed or d.left_off:
        table(["change", "variant", "knob"], [["added", v, reg.variants[v].knob] for v in d.added] +
              [["removed", v, reg.variants[v].knob] for v in d.removed] +
              [["measured, left off", v, reg.variants[v].knob] for v in d.left_off], title="Variants")
        for v in d.left_off:  # what was measured and left off, as the markdown says it
            heading(f"Measured and left off (rejected, not a default): {reg.variants[v].knob} "
                    f"({reg.variants[v].summary.rstrip('.')})")
    if d.fields:
        table(["field", A, B], [[f, a, b] for f, a, b in d.fields], title="Profile fields")
    if d.changed:
        show_src = d.a.kind == "profile" or d.b.kind == "profile"
        cols = ["variant", "knob", "tp", A, B] + (["source in " + B] if show_src else [])
        table(cols, [[c.variant, c.knob, c.tp, value_text(c.a), value_text(c.b)] + ([c.b_source] if show_src else [])
                     for c in d.changed], title="Changed values")
    else:
        heading("No value differs.")
    for key in sorted(set(d.a.kv_tokens) | set(d.b.kv_tokens)):
        ka, kb = d.a.kv_tokens.get(key), d.b.kv_tokens.get(key)
        if ka is not None and kb is not None:
            heading(f"KV cache at {key}: {ka:,} -> {kb:,} tokens ({kb - ka:+,})")
    RA, RB = side_names(d, A, B)
    rows = [r for r in d.bench if r.stack == "ours"]  # every figure the markdown gives (a 0 change is a fact)
    if rows:
        table(["config", "metric", "source", RA, RB, "change"],
              [[r.config + (f" {r.setting}" if r.setting else ""), row_label(r), method_label(r.method), cell(r.a, r.a_alt),
                cell(r.b, r.b_alt), fmt_delta(r)] for r in rows], title="Numbers")
    for rel in (RA, RB):
        items = [v for v in d.vs_reference if v.release == rel]
        if items:
            table(["config", "metric", "source", rel, "reference", "ours vs reference"],
                  [[cfg] + r for cfg in dict.fromkeys(v.config for v in items)
                   for r in vs_reference_rows([v for v in items if v.config == cfg])],
                  title=f"{rel} vs the reference stack")
    for cfg, text in [(c, t) for _, c, t in d.texts]:
        heading(f"{config_label(cfg)}: {text}")
    for q in d.quality:
        table(["", eval_label(q), "HumanEval", "strict sanity"], quality_rows(q),
              title=f"Quality gate ({config_label(q.config)})")
        heading(f"Paired: {quality_text(q)}")
    for rel, text in d.notes:
        heading(f"Notes ({rel}): {text}")
    return 0


def render_markdown(reg, d, A: str, B: str) -> str:
    out = [f"## {A} -> {B}", ""]
    if d.headline:
        out += [d.headline, ""]
    for rel, proj in d.projects.items():
        out += [f"{rel} is a release of {proj} (this project), not of the original stack; it extends "
                f"{reg.releases[rel].previous}.", ""]
    if d.changed:
        out += ["**What changed for someone running it**", "", f"| knob | TP | {A} | {B} |", "|---|---|---|---|"]
        for c in d.changed:
            out.append(f"| `{c.knob}` | {c.tp} | {value_text(c.a)} | {value_text(c.b)} |")
        out.append("")
    if d.added:
        out += ["New knobs: " + ", ".join(f"`{reg.variants[v].knob}`" for v in d.added), ""]
    if d.left_off:
        out += ["Measured and left off (rejected, not a default): " + "; ".join(
            f"`{reg.variants[v].knob}` ({reg.variants[v].summary.rstrip('.')})" for v in d.left_off), ""]
    RA, RB = side_names(d, A, B)
    groups: dict = {}
    for r in d.bench:
        if r.stack == "ours":
            groups.setdefault((r.config, r.setting), []).append(r)
    for (cfg, setting), rows in groups.items():
        out += [f"**Numbers: {config_label(cfg, setting)}**", "",
                f"| | source | {RA} | {RB} | change |", "|---|---|---|---|---|"]
        for r in rows:
            out.append(f"| {row_label(r)} | {method_label(r.method)} | {cell(r.a, r.a_alt)} | {cell(r.b, r.b_alt)} | "
                       f"{pct_change(r)} |")
        out.append("")
    for rel in (RA, RB):
        items = [v for v in d.vs_reference if v.release == rel]
        by_cfg: dict = {}
        for v in items:
            by_cfg.setdefault(v.config, []).append(v)
        for cfg, vs in by_cfg.items():
            out += [f"**{rel} vs the reference stack: {config_label(cfg)}** (the fastest known alternative stack, "
                    "same box, checkpoint and cap)", "",
                    f"| | source | {rel} | reference | ours vs reference |", "|---|---|---|---|---|"]
            out += ["| " + " | ".join(r) + " |" for r in vs_reference_rows(vs)]
            out.append("")
    for rel, cfg, text in d.texts:
        out += [f"{config_label(cfg)} ({rel}): {text}", ""]
    for q in d.quality:
        out += [f"**Quality gate: {config_label(q.config)}**", "",
                f"| | {eval_label(q)} | HumanEval | strict sanity |", "|---|---|---|---|"]
        out += ["| " + " | ".join(r) + " |" for r in quality_rows(q)]
        out += ["", f"Paired per question: {quality_text(q)}.", ""]
    for rel, text in d.notes:
        out += [f"Notes ({rel}): {text}", ""]
    return "\n".join(out).rstrip() + "\n"
