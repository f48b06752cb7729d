"""Field-level diffs between two releases or profiles (OpenFeature ``compare`` style).

A *side* is a release (``v0.3.1`` or ``release:v0.3.1``) or a profile name. For each side we compute
the value of every variant (per TP size for a release: the primary model's defaults (models.toml) at each
TP size it is served at unless a TP is given; at the profile's TP for a profile), then report:

* variants added or removed between the sides (a release's ``since``; a variant at a removed status);
* changed values, per TP key, with provenance for profiles;
* bench numbers of both releases side by side, matched on (config, metric, stack), with delta and %;
* quality records, using a paired record of B against A where B has one.

The result is plain data (:class:`Diff`); :mod:`r9k.r9kctl.cmd_diff` renders it as a table, JSON or
markdown, and the control panel shows the same object.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .loader import Registry
from .memory import budget
from .resolve import primary_model, resolve, value_at_release
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


@dataclass
class BenchRow:
    config: str
    metric: str
    unit: Optional[str]
    stack: str
    a: Optional[BenchRecord]
    b: Optional[BenchRecord]

    @property
    def delta(self) -> Optional[float]:
        if self.a is None or self.b is None or self.a.point() is None or self.b.point() is None:
            return None
        return self.b.point() - self.a.point()

    @property
    def pct(self) -> Optional[float]:
        d = self.delta
        if d is None or not self.a.point():
            return None
        return 100.0 * d / self.a.point()


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
    changed: list[ValueChange] = field(default_factory=list)
    release_changes: list[dict] = field(default_factory=list)  # B's declared default changes (releases)
    bench: list[BenchRow] = field(default_factory=list)
    quality: list[QualityRow] = field(default_factory=list)
    fields: list[tuple[str, object, object]] = field(default_factory=list)  # profile-level fields that differ

    def to_dict(self) -> dict:
        def rec(r):
            return None if r is None else r.model_dump(exclude_none=True)

        return {
            "a": {"spec": self.a.spec, "kind": self.a.kind, "kv_tokens": self.a.kv_tokens},
            "b": {"spec": self.b.spec, "kind": self.b.kind, "kv_tokens": self.b.kv_tokens},
            "added": self.added,
            "removed": self.removed,
            "changed": [c.__dict__ for c in self.changed],
            "release_changes": self.release_changes,
            "fields": [{"field": f, "a": a, "b": b} for f, a, b in self.fields],
            "bench": [{"config": r.config, "metric": r.metric, "unit": r.unit, "stack": r.stack,
                       "a": rec(r.a), "b": rec(r.b), "delta": r.delta, "pct": r.pct} for r in self.bench],
            "quality": [{"config": q.config, "eval": q.eval, "a_pct": q.a_pct, "a_correct": q.a_correct,
                         "b_pct": q.b_pct, "b_correct": q.b_correct, "total": q.total, "paired": q.paired,
                         "record": rec(q.record)} for q in self.quality],
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
    from .resolve import profile_chain

    _, base, _ = profile_chain(reg, prof.name)
    return base if base in reg.releases else None


def diff(reg: Registry, a: str, b: str, tp: Optional[int] = None) -> Diff:
    sa, sb = _side(reg, a, tp), _side(reg, b, tp)
    d = Diff(sa, sb)
    order = reg.release_order()

    # added / removed variants (by the releases' 'since', for release sides)
    if sa.kind == "release" and sb.kind == "release":
        ia, ib = order.index(sa.name), order.index(sb.name)
        for vid, v in sorted(reg.variants.items()):
            if v.since in order:
                s = order.index(v.since)
                if ia < s <= ib:
                    d.added.append(vid)
                elif ib < s <= ia:
                    d.removed.append(vid)
        d.release_changes = [c.model_dump(by_alias=True, exclude_none=True)
                             for r in order[min(ia, ib) + 1: max(ia, ib) + 1] for c in reg.releases[r].default_changes]

    keys = sorted(set(sa.tp_keys) | set(sb.tp_keys))
    common = [k for k in keys if k in sa.tp_keys and k in sb.tp_keys] or keys
    for vid in sorted(reg.variants):
        v = reg.variants[vid]
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
    if rel_a and rel_b and rel_a != rel_b:
        d.bench = _bench(reg, rel_a, rel_b)
        d.quality = _quality(reg, rel_a, rel_b)
    return d


def _bench(reg: Registry, a: str, b: str) -> list[BenchRow]:
    ra, rb = reg.releases[a], reg.releases[b]

    def index(recs):
        out: dict = {}
        for r in recs:
            if r.value is None and r.low is None:
                continue
            out.setdefault((r.config, r.metric, r.stack, r.platform), r)
        return out

    ia, ib = index(ra.bench), index(rb.bench)
    order = config_order(reg)
    _bench_order = lambda key: bench_order(key, order)  # noqa: E731
    rows = []
    for key in sorted(set(ia) & set(ib), key=_bench_order):  # numbers both releases report
        cfg, metric, stack, _plat = key
        unit = (ib.get(key) or ia.get(key)).unit
        rows.append(BenchRow(cfg, metric, unit, stack, ia.get(key), ib.get(key)))
    for key in sorted(set(ib) - set(ia), key=_bench_order):  # B's numbers on another platform (e.g. this project's H200 runs)
        cfg, metric, stack, plat = key
        if plat == "r9700":
            continue
        rows.append(BenchRow(cfg, metric, ib[key].unit, stack, None, ib[key]))
    return rows


def config_order(reg: Registry) -> list[str]:
    """Bench configs, headline first: the primary model's, then the others' (models.toml order), each at
    its TP sizes, largest first: ``<scope>_tp<N>``."""
    models = sorted(reg.models.values(), key=lambda m: not m.primary)
    return [f"{m.scope}_tp{t}" for m in models if m.scope for t in m.tp_sizes]


METRIC_ORDER = ["decode_step_ms", "single_stream_tok_s", "betterbench_decode_tok_s", "betterbench_step_p50_ms",
                "concurrency_tok_s", "prefill_tok_s", "ttft_p50_ms", "kv_cache_tokens"]


def bench_order(key: tuple, configs: list[str]) -> tuple:
    """Headline first: configs in ``configs`` order (see config_order); decode step and single stream first."""
    cfg, metric, stack, plat = key
    base, _, sub = metric.partition("@")
    ci = configs.index(cfg) if cfg in configs else len(configs)
    mi = METRIC_ORDER.index(base) if base in METRIC_ORDER else len(METRIC_ORDER)
    num = int("".join(ch for ch in sub if ch.isdigit()) or 0)
    return (plat != "r9700", ci, cfg, mi, base, num, sub, stack)


def _quality(reg: Registry, a: str, b: str) -> list[QualityRow]:
    ra, rb = reg.releases[a], reg.releases[b]
    rows = []
    for q in rb.quality:
        if q.accuracy_pct is None and q.mcnemar is None:
            continue
        if q.baseline_release == a and q.baseline_accuracy_pct is not None:
            rows.append(QualityRow(q.config, q.eval, q.baseline_accuracy_pct, q.baseline_correct, q.accuracy_pct,
                                   q.correct, q.total, True, q))
            continue
        prev = next((x for x in ra.quality if x.config == q.config and x.eval == q.eval and x.accuracy_pct), None)
        rows.append(QualityRow(q.config, q.eval, prev.accuracy_pct if prev else None, prev.correct if prev else None,
                               q.accuracy_pct, q.correct, q.total, False, q, prev))
    return rows
