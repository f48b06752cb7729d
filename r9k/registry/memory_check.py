"""The memory model against every KV-cache figure the original stack gives, and its one calibration.

    python -m r9k.registry.memory_check            # the error table (markdown)
    python -m r9k.registry.memory_check --fit      # the overhead a TP size that the figures call for

Exit codes: 0 every bounded figure within its bound, 1 a row over its bound (named on stderr), 2 bad input.

Each figure is a configuration (a model, a TP size, a release's defaults, optionally knobs set) and the KV
tokens the original measured, or a difference of two configurations (a knob's cost in tokens). The
prediction goes through the model (:func:`r9k.registry.memory.budget_of` with the release's resolved values),
on the original's cards (32,624 MiB, its ``UTIL``/``KVMEM`` defaults).
"""
from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .loader import Registry, load_registry
from .memory import budget_of
from .resolve import value_at_release

CARD_GIB = 32_624 / 1024  # the original's cards as vLLM sees them ('of 32,624 MiB')


@dataclass
class Figure:
    label: str
    model: str
    tp: int
    release: str
    target: int
    source: str
    bound_pct: Optional[float] = 2.0  # the bound issue 12 sets on this figure (None: reported only)
    sets: dict = field(default_factory=dict)  # knob -> value on top of the release's defaults
    base_sets: Optional[dict] = None  # a difference: tokens(base_sets) - tokens(sets)
    range: Optional[list] = None  # [low, high]: the record is a range; the error is the distance to it
    calibrates: Optional[str] = None  # the model constant this figure set (registry/models.toml): in-sample

    def error_pct(self, predicted: int) -> float:
        """Relative error of ``predicted`` against the target, or the nearer end of a range (0 inside it)."""
        if self.range:
            low, high = self.range
            if low <= predicted <= high:
                return 0.0
            end = low if predicted < low else high
            return 100.0 * (predicted - end) / end
        return 100.0 * (predicted - self.target) / self.target

    @property
    def is_delta(self) -> bool:
        return self.base_sets is not None


def load_figures(path: Optional[Path] = None) -> list[Figure]:
    """The figures of ``registry/kv_figures.toml`` (data: the engine names no model)."""
    data = tomllib.loads((path or Path(__file__).with_name("kv_figures.toml")).read_text(encoding="utf-8"))
    return [Figure(**{**f, "bound_pct": f.get("bound_pct")}) for f in data.get("figure", [])]


FIGURES = load_figures()


def values_at(reg: Registry, release: str, model: str, tp: int, sets: dict) -> dict:
    vals = {v.knob: value_at_release(reg, v, release, model, tp) for v in reg.variants.values()}
    vals.update(sets)
    return vals


def tokens(reg: Registry, model: str, tp: int, release: str, sets: dict) -> int:
    b = budget_of(reg, model, tp, CARD_GIB, values_at(reg, release, model, tp, sets))
    if b is None:
        raise KeyError(f"no memory numbers for {model} at TP{tp}")
    return b.kv_tokens


def predict(reg: Registry, f: Figure) -> int:
    if f.is_delta:
        return tokens(reg, f.model, f.tp, f.release, f.base_sets) - tokens(reg, f.model, f.tp, f.release, f.sets)
    return tokens(reg, f.model, f.tp, f.release, f.sets)


def fitted(reg: Registry, f: Figure) -> bool:
    """Whether the overhead fit (:func:`fit`) balances its error on ``f``: a bounded absolute figure without a
    fixed KV budget."""
    return not f.is_delta and f.bound_pct is not None and "KVMEM" not in f.sets \
        and not values_at(reg, f.release, f.model, f.tp, f.sets).get("KVMEM")


def sample(reg: Registry, f: Figure) -> str:
    """``in-sample: <what it calibrates>`` for a figure a model constant was set from, else ``held out``."""
    if fitted(reg, f):
        return f"in-sample: {f.model} overhead_bytes_per_gpu tp{f.tp} (memory_check --fit)"
    return f"in-sample: {f.calibrates}" if f.calibrates else "held out"


def table(reg: Registry) -> list[dict]:
    out = []
    for f in FIGURES:
        p = predict(reg, f)
        err = f.error_pct(p)
        out.append({"figure": f.label, "original": f.target, "predicted": p, "error_pct": err,
                    "range": f.range,
                    "bound_pct": f.bound_pct, "ok": None if f.bound_pct is None else abs(err) <= f.bound_pct,
                    "sample": sample(reg, f), "source": f.source})
    return out


def render(rows: list[dict]) -> str:
    lines = ["| KV figure | original | predicted | error | bound | | sample |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        bound = f"{r['bound_pct']:g}%" if r["bound_pct"] is not None else "-"
        mark = "" if r["ok"] is None else ("ok" if r["ok"] else "**over**")
        rec = f"{r['original']:,}" + (f" (record {r['range'][0]:,}-{r['range'][1]:,})" if r.get("range") else "")
        lines.append(f"| {r['figure']} | {rec} | {r['predicted']:,} | {r['error_pct']:+.1f}% | {bound} | "
                     f"{mark} | {r['sample']} |")
    ins = sum(1 for r in rows if r["sample"].startswith("in-sample"))
    held = [r for r in rows if not r["sample"].startswith("in-sample")]
    worst = max(held, key=lambda r: abs(r["error_pct"]), default=None)
    lines += ["", f"{ins} of {len(rows)} figures are in-sample (a model constant was set from them: their error "
                  f"shows the calibration, not a prediction); {len(held)} are held out"
              + (f" (largest error {worst['error_pct']:+.1f}%: {worst['figure']})" if worst else "")
              + "; every bounded row is in-sample" * all(r["sample"].startswith("in-sample")
                                                          for r in rows if r["bound_pct"] is not None)]
    return "\n".join(lines)


def fit(reg: Registry) -> dict:
    """The overhead a (model, TP size) that minimises the largest relative error of its bounded absolute figures
    without a fixed KV budget (the calibration; the variants' costs and the weights are from the dims)."""
    out = {}
    keys = sorted({(f.model, f.tp) for f in FIGURES if fitted(reg, f)})
    for model, tp in keys:
        m = reg.models[model]
        figs = [f for f in FIGURES if f.model == model and f.tp == tp and fitted(reg, f)]
        cur = m.overhead_bytes_per_gpu.get(f"tp{tp}", 0)
        bpt = m.kv_bytes_per_token[f"tp{tp}"]
        # tokens move by -1/bpt a byte of overhead: shift so the largest over- and under-prediction balance
        preds = [(predict(reg, f), f.target) for f in figs]
        lo = min(p / t for p, t in preds)
        hi = max(p / t for p, t in preds)
        # find s (tokens to subtract) with max((p - s)/t) - 1 == 1 - min((p - s)/t): bisection
        a, b = -200_000.0, 200_000.0
        for _ in range(80):
            s = (a + b) / 2
            over = max((p - s) / t for p, t in preds) - 1
            under = 1 - min((p - s) / t for p, t in preds)
            a, b = (s, b) if over > under else (a, s)
        out[f"{model} tp{tp}"] = {"overhead_bytes": int(cur + s * bpt), "max_error_pct": 100 * max(
            abs((p - s) / t - 1) for p, t in preds), "ratio_range": (lo, hi)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m r9k.registry.memory_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", action="store_true", help="print the calibrated overhead a TP size")
    args = ap.parse_args(argv)
    reg = load_registry()
    if args.fit:
        for k, v in fit(reg).items():
            print(f"{k}: overhead_bytes_per_gpu = {v['overhead_bytes']:_} (largest error {v['max_error_pct']:.2f}%)")
        return 0
    rows = table(reg)
    print(render(rows))
    over = [r for r in rows if r["ok"] is False]
    for r in over:
        sys.stderr.write(f"memory_check: over its bound: {r['figure']}: error {r['error_pct']:+.1f}% "
                         f"(bound {r['bound_pct']:g}%)\n")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
