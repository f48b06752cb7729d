"""Field-level diffs between two releases or profiles (a *side*: ``v0.3.1``, ``release:v0.3.1`` or a profile).

Reports variants added or removed, changed values per TP key (with provenance for profiles), bench numbers
matched on (config, metric, stack) with delta and %, and quality records. The result is plain data
(:class:`Diff`); :mod:`r9k.r9kctl.cmd_diff` renders it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from .loader import Registry
from .memory import budget
from .resolve import primary_model, profile_chain, resolve, value_at_release
from .schema import BenchRecord, QualityRecord

@dataclass
class ValueChange:
    variant: str
    knob: str
    tp: str
    a: Optional[str]
    b: Optional[str]
    a_source: Optional[str] = None
    b_source: Optional[str] = None


def _fmt_num(x: float) -> str:
    if abs(x) >= 1000 and float(x).is_integer():
        return f"{x:,.0f}"
    if float(x).is_integer():
        return f"{x:.0f}"
    return f"{x:,.2f}".rstrip("0").rstrip(".") if abs(x) >= 1000 else f"{x:g}"


def figure_text(r: Optional[BenchRecord]) -> str:
    """A figure as the notes write it: a value, a range kept a range, 'unchanged', a before -> after."""
    if r is None:
        return "-"
    if r.unchanged and r.point() is None:
        return "unchanged"
    if r.low is not None and r.value is None:
        s = r.text if r.text and re.search(r"\d", r.text) and len(r.text) <= 24 else \
            f"{_fmt_num(r.low)}-{_fmt_num(r.high)}"
    elif r.value is not None:
        s = ("~" if r.approx else "") + _fmt_num(r.value)
        if r.low is not None:
            s += f" ({_fmt_num(r.low)}-{_fmt_num(r.high)})"
    else:
        return r.text or "-"
    if r.unit == "%" and not s.endswith("%"):
        s += "%"
    if r.before is not None:
        s = f"{_fmt_num(r.before)} -> {s}"
    return s


@dataclass
class BenchRow:
    """One figure of the two releases (config, setting, metric, stack, method): ``a``/``b`` the figures shown
    (the seed's first), ``a_alt``/``b_alt`` the other source's differing figures of the same row."""

    config: str
    metric: str
    unit: Optional[str]
    stack: str
    a: Optional[BenchRecord]
    b: Optional[BenchRecord]
    method: Optional[str] = None
    setting: Optional[str] = None
    launch: Optional[str] = None
    platform: str = "r9700"
    a_alt: list[BenchRecord] = field(default_factory=list)
    b_alt: list[BenchRecord] = field(default_factory=list)
    only: Optional[str] = None  # the one release that gives this figure
    note: Optional[str] = None  # 'unchanged (notes)'

    @property
    def delta(self) -> Optional[float]:
        if self.a is None or self.b is None or self.a.point() is None or self.b.point() is None:
            return None
        if self.a.before is not None or self.b.before is not None:
            return None  # a before -> after within a release: not a release-to-release change
        return self.b.point() - self.a.point()

    @property
    def pct(self) -> Optional[float]:
        d = self.delta
        if d is None or not self.a.point():
            return None
        return 100.0 * d / self.a.point()

    def to_dict(self) -> dict:
        def rec(r):
            return None if r is None else r.model_dump(exclude_none=True)

        return {"config": self.config, "setting": self.setting, "metric": self.metric, "unit": self.unit,
                "stack": self.stack, "method": self.method, "launch": self.launch, "platform": self.platform,
                "a": rec(self.a), "b": rec(self.b), "a_text": figure_text(self.a), "b_text": figure_text(self.b),
                "a_alt_text": [figure_text(r) for r in self.a_alt], "b_alt_text": [figure_text(r) for r in self.b_alt],
                "a_alt": [rec(r) for r in self.a_alt], "b_alt": [rec(r) for r in self.b_alt],
                "only": self.only, "note": self.note, "delta": self.delta, "pct": self.pct}


@dataclass
class VsReference:
    """A release's figure against the reference stack's of the same row (ours / reference)."""

    release: str
    config: str
    metric: str
    unit: Optional[str]
    method: Optional[str]
    ours: BenchRecord
    reference: BenchRecord

    @property
    def lower_is_better(self) -> bool:
        return self.unit in ("ms", "s", "us", "nodes", "launches")

    @property
    def ratio(self) -> Optional[float]:
        o, r = self.ours.point(), self.reference.point()
        if not o or not r:
            return None
        return o / r

    @property
    def pct(self) -> Optional[float]:
        return None if self.ratio is None else 100.0 * (self.ratio - 1.0)

    def to_dict(self) -> dict:
        return {"release": self.release, "config": self.config, "metric": self.metric, "unit": self.unit,
                "method": self.method, "ours": figure_text(self.ours), "reference": figure_text(self.reference),
                "ratio": self.ratio, "pct": self.pct}


@dataclass
class QualityRow:
    config: str
    eval: str
    a_pct: Optional[float]
    a_correct: Optional[int]
    b_pct: Optional[float]
    b_correct: Optional[int]
    total: Optional[int]
    paired: bool
    record: Optional[QualityRecord]
    a_record: Optional[QualityRecord] = None
    a_label: Optional[str] = None  # what the A row is: 'v0.3.0 defaults (same tree)', a baseline's label
    b_label: Optional[str] = None
    a_humaneval: Optional[int] = None
    b_humaneval: Optional[int] = None
    humaneval_total: Optional[int] = None
    a_sanity: Optional[str] = None
    b_sanity: Optional[str] = None
    only: Optional[str] = None

    def to_dict(self) -> dict:
        r = self.record or self.a_record
        mc = r.mcnemar if r is not None else None
        return {"config": self.config, "eval": self.eval, "a_label": self.a_label, "b_label": self.b_label,
                "a_pct": self.a_pct, "a_correct": self.a_correct, "b_pct": self.b_pct, "b_correct": self.b_correct,
                "total": self.total, "paired": self.paired, "a_humaneval": self.a_humaneval,
                "b_humaneval": self.b_humaneval, "humaneval_total": self.humaneval_total,
                "a_sanity": self.a_sanity, "b_sanity": self.b_sanity, "only": self.only,
                "mcnemar": None if mc is None else {"b": mc.b, "c": mc.c, "p": mc.p, "vs": mc.vs},
                "identical_outputs_pct": r.identical_outputs_pct if r is not None else None,
                "other_range_pct": r.other_range_pct if r is not None else None,
                "other_label": r.other_label if r is not None else None,
                "record": None if self.record is None else self.record.model_dump(exclude_none=True)}


@dataclass
class Side:
    spec: str
    kind: str  # release | profile
    name: str
    tp_keys: list[str]
    values: dict[tuple[str, str], tuple[Optional[str], Optional[str]]]  # (variant, tp key) -> (value, source)
    kv_tokens: dict[str, Optional[int]] = field(default_factory=dict)


@dataclass
class Diff:
    a: Side
    b: Side
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    left_off: list[str] = field(default_factory=list)  # rejected variants that came in between: measured, left off
    changed: list[ValueChange] = field(default_factory=list)
    release_changes: list[dict] = field(default_factory=list)  # B's declared default changes (releases)
    rel_a: Optional[str] = None  # the releases whose numbers are compared (a profile's base release)
    rel_b: Optional[str] = None
    bench: list[BenchRow] = field(default_factory=list)
    vs_reference: list[VsReference] = field(default_factory=list)
    quality: list[QualityRow] = field(default_factory=list)
    texts: list[tuple[str, str, str]] = field(default_factory=list)  # (release, config, the notes' words)
    fields: list[tuple[str, object, object]] = field(default_factory=list)  # profile-level fields that differ
    headline: Optional[str] = None  # B's release headline (B a release)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (release, its notes): B's, when B is a release
    knobs: dict[str, tuple[str, str]] = field(default_factory=dict)  # added/removed/left-off id -> (knob, summary)
    projects: dict[str, str] = field(default_factory=dict)  # release -> project, for the sides' releases of this
    # project (not the original's): 'v0.3.2-r9k.1' -> 'r9k-stack'

    def to_dict(self) -> dict:
        return {
            "a": {"spec": self.a.spec, "kind": self.a.kind, "release": self.rel_a, "kv_tokens": self.a.kv_tokens},
            "b": {"spec": self.b.spec, "kind": self.b.kind, "release": self.rel_b, "kv_tokens": self.b.kv_tokens},
            "added": self.added,
            "removed": self.removed,
            "left_off": self.left_off,
            "changed": [c.__dict__ for c in self.changed],
            "release_changes": self.release_changes,
            "fields": [{"field": f, "a": a, "b": b} for f, a, b in self.fields],
            "bench": [r.to_dict() for r in self.bench],
            "vs_reference": [v.to_dict() for v in self.vs_reference],
            "quality": [q.to_dict() for q in self.quality],
            "texts": [{"release": r, "config": c, "text": t} for r, c, t in self.texts],
            "variants": {v: {"knob": self.knobs.get(v, (None, None))[0], "summary": self.knobs.get(v, (None, None))[1]}
                         for v in self.added + self.removed + self.left_off},
            "headline": self.headline,
            "notes": [{"release": r, "text": t} for r, t in self.notes],
            "projects": self.projects,
        }


def parse_side(reg: Registry, spec: str) -> tuple[str, str]:
    """('release', version) or ('profile', name); KeyError with the spec if it is neither."""
    s = spec[len("release:"):] if spec.startswith("release:") else spec
    if s in reg.releases:
        return "release", s
    if spec in reg.profiles:
        return "profile", spec
    raise KeyError(spec)


def _side(reg: Registry, spec: str, tp: Optional[int]) -> Side:
    kind, name = parse_side(reg, spec)
    values: dict = {}
    kv: dict = {}
    if kind == "release":
        primary = primary_model(reg)
        tps = [tp] if tp else (primary.tp_sizes if primary else [1])
        for t in tps:
            for vid, v in reg.variants.items():
                values[(vid, f"tp{t}")] = (value_at_release(reg, v, name, primary and primary.name, t),
                                           f"release {name}")
        return Side(spec, kind, name, [f"tp{t}" for t in tps], values, kv)
    rs = resolve(reg, name, tp=tp, env={})
    key = f"tp{rs.tp}"
    for vid, r in rs.items.items():
        values[(vid, key)] = (r.value, f"{r.layer}: {r.source}")
    b = budget(reg, rs)
    kv[key] = b.kv_tokens if b else None
    return Side(spec, kind, name, [key], values, kv)


def _release_of(reg: Registry, side: Side) -> Optional[str]:
    if side.kind == "release":
        return side.name
    prof = reg.profiles[side.name]
    _, base, _ = profile_chain(reg, prof.name)
    return base if base in reg.releases else None


def diff(reg: Registry, a: str, b: str, tp: Optional[int] = None, all_numbers: bool = False) -> Diff:
    """The diff of side A against side B; ``all_numbers`` adds the figures no release notes of A or B state."""
    sa, sb = _side(reg, a, tp), _side(reg, b, tp)
    d = Diff(sa, sb)
    order = reg.release_order()

    # added / removed variants (by the releases' 'since', for release sides); a rejected one is 'left off'
    if sa.kind == "release" and sb.kind == "release":
        ia, ib = order.index(sa.name), order.index(sb.name)
        for vid, v in sorted(reg.variants.items()):
            if v.since in order:
                s = order.index(v.since)
                if ia < s <= ib:
                    (d.left_off if v.status.state == "rejected" else d.added).append(vid)
                elif ib < s <= ia:
                    d.removed.append(vid)
        d.release_changes = [c.model_dump(by_alias=True, exclude_none=True)
                             for r in order[min(ia, ib) + 1: max(ia, ib) + 1] for c in reg.releases[r].default_changes]

    keys = sorted(set(sa.tp_keys) | set(sb.tp_keys))
    common = [k for k in keys if k in sa.tp_keys and k in sb.tp_keys] or keys[:1]  # no TP in common: one pair
    for vid in sorted(reg.variants):
        v = reg.variants[vid]
        if vid in d.left_off:
            continue  # measured and left off: its value is the no-op, not a change
        for k in common:
            ka = k if k in sa.tp_keys else sa.tp_keys[0]
            kb = k if k in sb.tp_keys else sb.tp_keys[0]
            va, srca = sa.values.get((vid, ka), (None, None))
            vb, srcb = sb.values.get((vid, kb), (None, None))
            if va != vb:
                d.changed.append(ValueChange(vid, v.knob, k if ka == kb else f"{ka}/{kb}", va, vb, srca, srcb))

    if sa.kind == "profile" and sb.kind == "profile":
        pa, pb = reg.profiles[sa.name], reg.profiles[sb.name]
        ra, rb = resolve(reg, sa.name, tp=tp, env={}), resolve(reg, sb.name, tp=tp, env={})
        for fname, x, y in (("model", ra.model, rb.model), ("tp", ra.tp, rb.tp),
                            ("platform", ra.platform, rb.platform), ("serve_args", ra.serve_args, rb.serve_args),
                            ("extra_env", ra.extra_env, rb.extra_env), ("hardware", ra.hardware, rb.hardware),
                            ("extends", pa.extends, pb.extends)):
            if x != y:
                d.fields.append((fname, x, y))

    rel_a, rel_b = _release_of(reg, sa), _release_of(reg, sb)
    if sb.kind == "release":
        d.headline = reg.releases[sb.name].headline
        if reg.releases[sb.name].notes:
            d.notes.append((sb.name, reg.releases[sb.name].notes))
    d.projects = {r: reg.releases[r].project for r in (rel_a, rel_b) if r and reg.releases[r].project}
    # numbers are those of the release that measured them: a project release without records of its own
    # shows the figures of the release it extends, under that release's name
    rel_a, rel_b = _numbers_release(reg, rel_a, rel_b), _numbers_release(reg, rel_b, rel_a)
    d.rel_a, d.rel_b = rel_a, rel_b
    d.knobs = {v: (reg.variants[v].knob, reg.variants[v].summary) for v in d.added + d.removed + d.left_off}
    if rel_a and rel_b and rel_a != rel_b:
        d.bench, d.texts = _bench(reg, rel_a, rel_b, all_numbers)
        d.vs_reference = [x for r in (rel_a, rel_b) for x in _vs_reference(reg, r, {rel_a, rel_b}, all_numbers)]
        d.quality = _quality(reg, rel_a, rel_b)
    return d


def _numbers_release(reg: Registry, rel: Optional[str], other: Optional[str] = None) -> Optional[str]:
    """The release whose numbers stand for ``rel`` against ``other``: a project release compared with the release
    it extends shows its own records; against any other release, the numbers of the release it extends."""
    seen = set()
    # (a project release's own records of a platform the original never ran on, such as its H200 decode-step
    # figures, are not release-to-release numbers of the served stack: they do not stop the walk)
    while rel and rel not in seen and reg.releases[rel].project and reg.releases[rel].previous != other \
            and not any(r.platform == "r9700" for r in reg.releases[rel].bench) \
            and not reg.releases[rel].quality and reg.releases[rel].previous in reg.releases:
        seen.add(rel)
        rel = reg.releases[rel].previous
    return rel


def _shown(r: BenchRecord, sides: set, all_numbers: bool) -> bool:
    """A figure the notes of one of the two releases give (or any, with all_numbers)."""
    return all_numbers or r.stated_in is None or r.stated_in in sides


def _row_key(r: BenchRecord) -> tuple:
    return (r.config, r.setting or "", r.metric, r.stack, r.platform, r.method or "", r.launch or "")


def _same_figure(x: BenchRecord, y: BenchRecord) -> bool:
    return (x.value, x.low, x.high, x.before, x.unchanged) == (y.value, y.low, y.high, y.before, y.unchanged)


def _pick(recs: list[BenchRecord]) -> tuple[Optional[BenchRecord], list[BenchRecord]]:
    """The figure to show (the seed's first) and the other source's differing figures of the same row."""
    if not recs:
        return None, []
    ordered = sorted(recs, key=lambda r: r.origin != "seed")
    shown = ordered[0]
    return shown, [r for r in ordered[1:] if not _same_figure(r, shown)]


def _index(recs, sides, all_numbers) -> dict:
    out: dict = {}
    for r in recs:
        if r.metric in ("validation_notes", "summary") or (r.point() is None and not r.unchanged):
            continue
        if _shown(r, sides, all_numbers):
            out.setdefault(_row_key(r), []).append(r)
    return out


def _bench(reg: Registry, a: str, b: str, all_numbers: bool = False) -> tuple[list[BenchRow], list]:
    ra, rb = reg.releases[a], reg.releases[b]
    sides = {a, b}
    ia, ib = _index(ra.bench, sides, all_numbers), _index(rb.bench, sides, all_numbers)
    # configurations a release's notes call unchanged as a whole (a summary record marked unchanged)
    unchanged_b = {r.config for r in rb.bench if r.metric == "summary" and r.unchanged}
    configs = config_order(reg)
    rows = []
    for key in sorted(set(ia) | set(ib), key=lambda k: bench_order(k, configs)):
        cfg, setting, metric, stack, plat, method, launch = key
        if stack != "ours" and not (key in ia and key in ib):
            continue  # a reference-stack figure of one release: in the 'vs reference stack' section
        if plat != "r9700" and key not in ib:
            continue
        ra_, a_alt = _pick(ia.get(key, []))
        rb_, b_alt = _pick(ib.get(key, []))
        unit = (rb_ or ra_).unit
        row = BenchRow(cfg, metric, unit, stack, ra_, rb_, method or None, setting or None, launch or None, plat,
                       a_alt, b_alt)
        if rb_ is not None and rb_.unchanged:
            row.note = "unchanged (notes)"
        elif ra_ is None:
            row.only = b
        elif rb_ is None:
            row.only = a
            if cfg in unchanged_b:
                row.note = f"unchanged in {b} (notes)"
        rows.append(row)
    texts = [(rel.version, r.config, r.text) for rel in (ra, rb) for r in rel.bench
             if r.metric == "summary" and r.text and _shown(r, sides, all_numbers)]
    return rows, texts


def _vs_reference(reg: Registry, release: str, sides: set, all_numbers: bool) -> list[VsReference]:
    """A release's figures against the reference stack's of the same row."""
    idx = _index(reg.releases[release].bench, sides, all_numbers)
    out = []
    configs = config_order(reg)
    for key in sorted(idx, key=lambda k: bench_order(k, configs)):
        cfg, setting, metric, stack, plat, method, launch = key
        if stack != "reference":
            continue
        ours = idx.get((cfg, setting, metric, "ours", plat, method, launch))
        if not ours:
            continue
        o, _ = _pick(ours)
        r, _ = _pick(idx[key])
        out.append(VsReference(release, cfg, metric, o.unit, method or None, o, r))
    return out


def config_order(reg: Registry) -> list[str]:
    """Bench configs ``<scope>_tp<N>``, headline first: the primary model's, then the others', largest TP first."""
    models = sorted(reg.models.values(), key=lambda m: not m.primary)
    return [f"{m.scope}_tp{t}" for m in models if m.scope for t in m.tp_sizes]


METRIC_ORDER = ["decode_step_ms", "single_stream_tok_s", "betterbench_decode_tok_s", "betterbench_step_p50_ms",
                "concurrency_tok_s", "prefill_tok_s", "ttft_p50_ms", "ttft_ms", "kv_cache_tokens",
                "graph_nodes_per_step", "graph_node_dispatch_us", "gdn_core_graph_nodes_per_layer",
                "shared_expert_launches", "launches_per_step", "vs_reference_pct"]
METHOD_ORDER = ["step-script", "probe", "betterbench", "release-table", "startup", "client", "notes", "kernel"]


def bench_order(key: tuple, configs: list[str]) -> tuple:
    """Headline first: configs in ``configs`` order, the defaults before other settings, decode step and single
    stream first, then per source (probe before BetterBench)."""
    cfg, setting, metric, stack, plat, method, launch = key
    base, _, sub = metric.partition("@")
    ci = configs.index(cfg) if cfg in configs else len(configs)
    mi = METRIC_ORDER.index(base) if base in METRIC_ORDER else len(METRIC_ORDER)
    si = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)
    num = int("".join(ch for ch in sub if ch.isdigit()) or 0)
    return (plat != "r9700", ci, cfg, setting, mi, base, si, num, sub, launch, stack)


def _quality(reg: Registry, a: str, b: str) -> list[QualityRow]:
    ra, rb = reg.releases[a], reg.releases[b]
    rows = []
    used_a = set()
    for q in rb.quality:
        if q.accuracy_pct is None and q.mcnemar is None:
            continue
        if q.baseline_release == a and q.baseline_accuracy_pct is not None:
            rows.append(QualityRow(q.config, q.eval, q.baseline_accuracy_pct, q.baseline_correct, q.accuracy_pct,
                                   q.correct, q.total, True, q, a_label=f"{a} defaults",
                                   b_label=f"{b} defaults", a_humaneval=q.baseline_humaneval_passed,
                                   b_humaneval=q.humaneval_passed, humaneval_total=q.humaneval_total,
                                   a_sanity=_sanity(q, baseline=True), b_sanity=_sanity(q)))
            continue
        prev = next((x for x in ra.quality if x.config == q.config and x.eval == q.eval and x.accuracy_pct), None)
        if prev is not None:
            used_a.add(id(prev))
        rows.append(QualityRow(q.config, q.eval, prev.accuracy_pct if prev else None, prev.correct if prev else None,
                               q.accuracy_pct, q.correct, q.total, False, q, prev,
                               a_label=a if prev else None, b_label=b,
                               a_humaneval=prev.humaneval_passed if prev else None, b_humaneval=q.humaneval_passed,
                               humaneval_total=q.humaneval_total or (prev.humaneval_total if prev else None),
                               a_sanity=_sanity(prev) if prev else None, b_sanity=_sanity(q),
                               only=None if prev else b))
    for p in ra.quality:
        if id(p) in used_a or (p.accuracy_pct is None and p.text is None):
            continue
        if any(r.config == p.config and r.eval == p.eval for r in rows):
            continue
        rows.append(QualityRow(p.config, p.eval, p.accuracy_pct, p.correct, None, None, p.total, False, None, p,
                               a_label=a, a_humaneval=p.humaneval_passed, humaneval_total=p.humaneval_total,
                               a_sanity=_sanity(p), only=a))
    return rows


def _sanity(q: QualityRecord, baseline: bool = False) -> Optional[str]:
    bad, total = (q.baseline_sanity_bad, q.baseline_sanity_total) if baseline else (q.sanity_bad, q.sanity_total)
    if bad is not None and total is not None:
        return f"{bad} bad of {total:,}"
    if baseline:
        return None
    return q.sanity
