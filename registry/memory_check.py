"""The memory model against every KV-cache figure the original stack gives, and its one calibration.

    python -m r9k.registry.memory_check            # the error table (markdown)
    python -m r9k.registry.memory_check --fit      # the overhead a TP size that the figures call for

Each figure is a configuration (a model, a TP size, a release's defaults, optionally knobs set) and the KV
tokens the original measured, or a difference of two configurations (a knob's cost in tokens). The
prediction goes through the model (:func:`r9k.registry.memory.budget_of` with the release's resolved values),
on the original's cards (32,624 MiB, its ``UTIL``/``KVMEM`` defaults).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Optional

from .loader import Registry
from .memory import budget_of
from .resolve import value_at_release

CARD_GIB = 32_624 / 1024  # the R9700's memory as vLLM sees it (the original's 'of 32,624 MiB')
FN, B27 = "qwen3.8-flash-next", "qwen3.8-27b"


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

    @property
    def is_delta(self) -> bool:
        return self.base_sets is not None


FIGURES = [
    Figure("v0.3.0 TP4", FN, 4, "v0.3.0", 442_575, "reference releases.toml v0.3.0 (release chain)"),
    Figure("v0.3.1 TP4", FN, 4, "v0.3.1", 452_115, "reference releases.toml v0.3.1 (warm)"),
    Figure("v0.3.2 TP4", FN, 4, "v0.3.2", 515_577, "reference releases.toml v0.3.2 (warm)"),
    Figure("v0.3.1 TP2", FN, 2, "v0.3.1", 166_818, "reference releases.toml v0.3.1 (warm)"),
    Figure("v0.3.2 TP2", FN, 2, "v0.3.2", 221_184, "reference releases.toml v0.3.2 (warm)"),
    Figure("27B TP2 (KVMEM=9)", B27, 2, "v0.3.1", 367_494, "reference releases.toml v0.3.0-v0.3.2"),
    Figure("v0.3.1 TP2, fp8 down copy (R9K_HC_FP8_DECODE=1)", FN, 2, "v0.3.1", 29_789,
           "seed v0.3.1: 133,306 -> 103,517 (cold launches)", 5.0, sets={"R9K_HC_FP8_DECODE": "1"}, base_sets={}),
    Figure("v0.3.1 TP2, fp8 down copy, warm", FN, 2, "v0.3.1", 26_810,
           "reference: 166,818 -> 140,008 (warm)", None, sets={"R9K_HC_FP8_DECODE": "1"}, base_sets={}),
    Figure("v0.3.1 TP2 with R9K_HC_FP8_DECODE=1", FN, 2, "v0.3.1", 140_008, "reference releases.toml v0.3.1 note",
           None, sets={"R9K_HC_FP8_DECODE": "1"}),
    Figure("v0.3.0 TP4, KVMEM=7.0", FN, 4, "v0.3.0", 474_928, "reference: KVMEM=7.0 gives 474,928 (calibrates the "
           "KV bytes a token)", None, sets={"KVMEM": "7.0"}),
    Figure("v0.2.4 TP4 (one page)", FN, 4, "v0.2.4", 279_564, "reference releases.toml v0.2.4", None),
    Figure("v0.2.4 TP4, stock pages -> one page", FN, 4, "v0.2.4", 279_564 - 256_682,
           "reference: 256,682 -> 279,564", None, sets={"R9K_GDN_STATE": "stock"}, base_sets={}),
    Figure("v0.2.4 TP2, stock pages -> one page (CGSIZES= as launched)", FN, 2, "v0.2.4", 183_202 - 154_641,
           "reference: 154,641 -> 183,202; TP2 launches pass CGSIZES= (vLLM's default)", None,
           sets={"R9K_GDN_STATE": "stock", "CGSIZES": ""}, base_sets={"CGSIZES": ""}),
    Figure("v0.2.5 TP4, UTIL 0.94 -> 0.98", FN, 4, "v0.2.5", 348_834 - 279_564, "reference UTIL: 0.98 alone "
           "279,564 -> 348,834", None, sets={}, base_sets={"UTIL": "0.98"}),
    Figure("v0.2.5 TP4, UTIL 0.98, CGSIZES <= 256", FN, 4, "v0.2.5", 442_575 - 348_834, "reference UTIL: with "
           "CGSIZES <= 256 442,575", None, sets={"UTIL": "0.98"},
           base_sets={"UTIL": "0.98", "CGSIZES": "1,2,4,8,16,24,32,48,64,96,128,192,256"}),
    Figure("v0.2.1 TP2, NBT 4096 -> 2048 (CGSIZES=)", FN, 2, "v0.2.1", 168_439 - 120_724, "reference NBT: FN TP2 "
           "NBT=2048 120,724 -> 168,439 KV", None, sets={"CGSIZES": ""}, base_sets={"NBT": "2048", "CGSIZES": ""}),
    Figure("v0.3.0 TP4, CGSIZES up to 2048", FN, 4, "v0.3.0", 94_000, "reference CGSIZES: +94k KV tokens at TP4 "
           "without sizes 384-2048", None,
           sets={"CGSIZES": "1,2,4,8,16,24,32,48,64,96,128,192,256,384,512,768,1024,1536,2048"}, base_sets={}),
]


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


def table(reg: Registry) -> list[dict]:
    out = []
    for f in FIGURES:
        p = predict(reg, f)
        err = 100.0 * (p - f.target) / f.target
        out.append({"figure": f.label, "original": f.target, "predicted": p, "error_pct": err,
                    "bound_pct": f.bound_pct, "ok": None if f.bound_pct is None else abs(err) <= f.bound_pct,
                    "source": f.source})
    return out


def render(rows: list[dict]) -> str:
    lines = ["| KV figure | original | predicted | error | bound | |", "|---|---|---|---|---|---|"]
    for r in rows:
        bound = f"{r['bound_pct']:g}%" if r["bound_pct"] is not None else "-"
        mark = "" if r["ok"] is None else ("ok" if r["ok"] else "**over**")
        lines.append(f"| {r['figure']} | {r['original']:,} | {r['predicted']:,} | {r['error_pct']:+.1f}% | {bound} | "
                     f"{mark} |")
    return "\n".join(lines)


def fit(reg: Registry) -> dict:
    """The overhead a TP size of Flash-Next that minimises the largest relative error of that TP's bounded
    absolute figures (the calibration; the variants' costs and the weights are from the dims)."""
    m = reg.models[FN]
    out = {}
    for tp in (4, 2):
        figs = [f for f in FIGURES if f.model == FN and f.tp == tp and not f.is_delta and f.bound_pct is not None]
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
        out[f"tp{tp}"] = {"overhead_bytes": int(cur + s * bpt), "max_error_pct": 100 * max(
            abs((p - s) / t - 1) for p, t in preds), "ratio_range": (lo, hi)}
    return out


def main(argv=None) -> int:
    from .loader import load_registry

    ap = argparse.ArgumentParser(prog="python -m r9k.registry.memory_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", action="store_true", help="print the calibrated overhead a TP size")
    args = ap.parse_args(argv)
    reg = load_registry()
    if args.fit:
        for k, v in fit(reg).items():
            print(f"{k}: overhead_bytes_per_gpu = {v['overhead_bytes']:_} (largest error {v['max_error_pct']:.2f}%)")
        return 0
    print(render(table(reg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
