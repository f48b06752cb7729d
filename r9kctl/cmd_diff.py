"""``r9kctl diff A B``: two releases or profiles, field by field, with their numbers side by side."""
from __future__ import annotations

LABELS = {
    "decode_step_ms": "decode step",
    "single_stream_tok_s": "single-stream decode",
    "betterbench_decode_tok_s": "BetterBench decode",
    "betterbench_step_p50_ms": "BetterBench step p50",
    "ttft_p50_ms": "time to first token p50",
    "kv_cache_tokens": "KV cache",
    "update_p99_ms": "update p99",
}


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


def fmt_rec(r) -> str:
    if r is None:
        return "-"
    if r.low is not None and r.high is not None and r.value is None:
        s = f"{r.low:g}-{r.high:g}"
    elif r.value is not None:
        s = f"{r.value:,.2f}".rstrip("0").rstrip(".") if abs(r.value) < 1000 else f"{r.value:,.0f}"
        if r.low is not None:
            s += f" ({r.low:g}-{r.high:g})"
    else:
        s = r.text or "-"
    return ("~" if r.approx else "") + s


def fmt_delta(row) -> str:
    if row.delta is None:
        return "-"
    pct = f" ({row.pct:+.1f}%)" if row.pct is not None else ""
    return f"{row.delta:+,.2f}".rstrip("0").rstrip(".") + pct


def quality_text(q) -> str:
    r = q.record
    bits = []
    if r is not None and r.mcnemar is not None:
        bits.append(f"{r.mcnemar.b} / {r.mcnemar.c} discordant, McNemar p = {r.mcnemar.p:.2f}")
    if r is not None and r.identical_outputs_pct is not None:
        bits.append(f"identical outputs {r.identical_outputs_pct:g}%")
    if r is not None and r.humaneval_passed is not None:
        bits.append(f"HumanEval {r.humaneval_passed} / {r.humaneval_total}")
    return "; ".join(bits) or "-"


def pct_text(p, n) -> str:
    if p is None:
        return "-"
    return f"{p:.2f}%" + (f" ({n:,})" if n is not None else "")


def add_parser(sub):
    p = sub.add_parser("diff", help="compare two releases or profiles (values, per-TP defaults, numbers)")
    p.add_argument("a", help="release (v0.3.0) or profile (tp4-default)")
    p.add_argument("b")
    p.add_argument("--tp", type=int, help="only this TP size")
    p.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    p.add_argument("--all-numbers", action="store_true", help="every bench number, not just the changed configs")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from r9k.registry.diff import diff, parse_side
    from r9k.registry.resolve import suggest

    from .common import fail, load
    from .output import heading, print_json, table

    reg = load(args.format, args)
    if reg is None:
        return 2
    for spec in (args.a, args.b):
        try:
            parse_side(reg, spec)
        except KeyError:
            hint = suggest(spec, list(reg.releases) + list(reg.profiles))
            return fail(f"'{spec}' is neither a release nor a profile" + (f" ({hint})" if hint else ""),
                        "unknown-side")
    d = diff(reg, args.a, args.b, tp=args.tp)
    if args.format == "json":
        print_json(d.to_dict())
        return 0
    A, B = args.a, args.b
    if args.format == "markdown":
        print(render_markdown(reg, d, A, B))
        return 0
    if d.added or d.removed:
        table(["change", "variant", "knob"], [["added", v, reg.variants[v].knob] for v in d.added] +
              [["removed", v, reg.variants[v].knob] for v in d.removed], title="Variants")
    if d.fields:
        table(["field", A, B], [[f, a, b] for f, a, b in d.fields], title="Profile fields")
    if d.changed:
        show_src = d.a.kind == "profile" or d.b.kind == "profile"
        cols = ["variant", "knob", "tp", A, B] + (["source in " + B] if show_src else [])
        table(cols, [[c.variant, c.knob, c.tp, c.a, c.b] + ([c.b_source] if show_src else []) for c in d.changed],
              title="Changed values")
    else:
        heading("No value differs.")
    for key in sorted(set(d.a.kv_tokens) | set(d.b.kv_tokens)):
        ka, kb = d.a.kv_tokens.get(key), d.b.kv_tokens.get(key)
        if ka is not None and kb is not None:
            heading(f"KV cache at {key}: {ka:,} -> {kb:,} tokens ({kb - ka:+,})")
    rows = [r for r in d.bench if r.stack == "ours" and (args.all_numbers or r.delta != 0)]
    if rows:
        table(["config", "metric", "unit", A, B, "change"],
              [[r.config, label(r.metric), r.unit, fmt_rec(r.a), fmt_rec(r.b), fmt_delta(r)] for r in rows],
              title="Numbers")
    if d.quality:
        table(["config", "eval", A, B, "paired"],
              [[q.config, q.eval, pct_text(q.a_pct, q.a_correct), pct_text(q.b_pct, q.b_correct), quality_text(q)]
               for q in d.quality], title="Quality")
    return 0


def render_markdown(reg, d, A: str, B: str) -> str:
    out = [f"## {A} -> {B}", ""]
    if d.b.kind == "release" and B in reg.releases:
        out += [reg.releases[B].headline, ""]
    if d.changed:
        out += ["**What changed for someone running it**", "", f"| knob | TP | {A} | {B} |", "|---|---|---|---|"]
        for c in d.changed:
            out.append(f"| `{c.knob}` | {c.tp} | {c.a if c.a is not None else '(unset)'} | "
                       f"{c.b if c.b is not None else '(unset)'} |")
        out.append("")
    if d.added:
        out += ["New knobs: " + ", ".join(f"`{reg.variants[v].knob}`" for v in d.added), ""]
    by_cfg: dict = {}
    for r in d.bench:
        if r.stack == "ours" and r.a is not None and r.b is not None:
            by_cfg.setdefault(r.config, []).append(r)
    for cfg, rows in by_cfg.items():
        out += [f"**Numbers ({cfg})**", "", f"| | {A} | {B} | change |", "|---|---|---|---|"]
        for r in rows:
            unit = f" ({r.unit})" if r.unit else ""
            pct = f"{r.pct:+.1f}%" if r.pct is not None else "-"
            out.append(f"| {label(r.metric)}{unit} | {fmt_rec(r.a)} | {fmt_rec(r.b)} | {pct} |")
        out.append("")
    if d.quality:
        out += ["**Quality gate**", "", f"| | {A} | {B} | paired |", "|---|---|---|---|"]
        for q in d.quality:
            total = f", {q.total:,} questions" if q.total else ""
            out.append(f"| {q.eval.upper()} ({q.config}{total}) | {pct_text(q.a_pct, q.a_correct)} | "
                       f"{pct_text(q.b_pct, q.b_correct)} | {quality_text(q)} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
