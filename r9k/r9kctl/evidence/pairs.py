"""Pairwise composition gate (``r9kctl gate --pairs --profile P``): do two variants, each fine alone, interact?

The CPU decode-step model runs at stock, with each of the profile's non-stock variants alone and with every
pair (one set of weights and inputs). With ``d(x) = ||y_x - y_stock|| / ||y_stock||``, a pair is reported when
``d(a, b) > d(a) + d(b)``. Variants that decide no op or weight format of the model are listed as not modelled.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional
from ..decode_step.config import get_config
from ..decode_step.dispatch import values_chooser


@dataclass
class PairResult:
    a: str
    b: str
    d_pair: float
    d_a: float
    d_b: float

    @property
    def excess(self) -> float:
        """d(a, b) / (d(a) + d(b)); > 1 means the pair does more than its parts (inf when both alone are 0)."""
        s = self.d_a + self.d_b
        return self.d_pair / s if s > 0 else (0.0 if self.d_pair == 0 else float("inf"))

    @property
    def flagged(self) -> bool:
        return self.d_pair > self.d_a + self.d_b


@dataclass
class PairsReport:
    profile: str
    config: str
    variants: list[str]  # the non-stock variants that take part, with their profile value
    values: dict[str, str]
    not_modelled: list[str]
    alone: dict[str, float]
    pairs: list[PairResult] = field(default_factory=list)
    seed: int = 0
    seconds: float = 0.0

    @property
    def flagged(self) -> list[PairResult]:
        return [p for p in self.pairs if p.flagged]

    def to_dict(self) -> dict:
        return {"profile": self.profile, "config": self.config, "seed": self.seed, "seconds": round(self.seconds, 1),
                "values": self.values, "not_modelled": self.not_modelled, "alone": self.alone,
                "pairs": [{"a": p.a, "b": p.b, "d_pair": p.d_pair, "d_a": p.d_a, "d_b": p.d_b,
                           "excess": p.excess, "flagged": p.flagged} for p in self.pairs],
                "flagged": [[p.a, p.b] for p in self.flagged]}


def _values(reg: Any, profile: str, tp: Optional[int]) -> tuple[dict, list[str]]:
    from ...registry.resolve import resolve

    rs = resolve(reg, profile, tp=tp)
    return {vid: r.value for vid, r in rs.items.items()}, [r.variant.id for r in rs.non_stock()]


def run_pairs(reg: Any, profile: str, tp: Optional[int] = None, config: str = "tiny", seed: int = 0,
              requests: int = 1, context: int = 32, progress: Callable[[str], None] = lambda m: None) -> PairsReport:
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are imported (no GPU here)
    from ..decode_step.run import model_ops
    from ..decode_step.model import DecodeStepModel, StepInputs, Weights

    t0 = time.monotonic()
    values, non_stock = _values(reg, profile, tp)
    stock, _ = _values(reg, "stock", tp)
    modelled = model_ops(values) | model_ops(stock)
    chosen = [v for v in non_stock if v in modelled and values.get(v) != stock.get(v)]
    cfg = get_config(config)
    w = Weights.build(cfg, seed=seed)
    inp = StepInputs.build(cfg, requests, context, seed=seed + 1)

    def step(on: tuple[str, ...]):
        vals = dict(stock)
        vals.update({v: values[v] for v in on})
        m = DecodeStepModel(w, inp, values_chooser(vals), flags=vals)
        return m.step().double()

    y0 = step(())
    norm = float(y0.norm())

    def dist(y) -> float:
        return float((y - y0).norm()) / norm if norm > 0 else float("inf")

    alone: dict[str, float] = {}
    for v in chosen:
        alone[v] = dist(step((v,)))
        progress(f"  {v}={values[v]} alone: {alone[v]:.3e}")
    rep = PairsReport(profile, config, chosen, {v: values[v] for v in chosen},
                      sorted(set(non_stock) - set(chosen)), alone, seed=seed)
    for a, b in itertools.combinations(chosen, 2):
        r = PairResult(a, b, dist(step((a, b))), alone[a], alone[b])
        rep.pairs.append(r)
        progress(f"  {a} + {b}: {r.d_pair:.3e} ({r.excess:.2f}x the sum alone)" + ("  <-- more than the sum" if r.flagged else ""))
    rep.seconds = time.monotonic() - t0
    return rep


def render(rep: PairsReport) -> str:
    lines = [f"pairwise composition gate: profile {rep.profile}, decode-step model '{rep.config}' on the CPU "
             f"(seed {rep.seed}, {rep.seconds:.0f} s)",
             f"{len(rep.variants)} non-stock variant(s) of the model, {len(rep.pairs)} pair(s); "
             "d = relative L2 distance of the step output from stock"]
    w = max((len(v) for v in rep.variants), default=8)
    lines.append("alone:")
    lines += [f"  {v:<{w}}  {rep.values[v]:<6} d = {rep.alone[v]:.3e}" for v in rep.variants]
    lines.append("pairs (d(a,b) vs d(a) + d(b)):")
    for p in sorted(rep.pairs, key=lambda p: -p.excess):
        mark = "  MORE THAN THE SUM" if p.flagged else ""
        lines.append(f"  {p.a} + {p.b}: {p.d_pair:.3e} vs {p.d_a + p.d_b:.3e} ({p.excess:.2f}x){mark}")
    if rep.not_modelled:
        lines.append(f"not modelled by the decode step ({len(rep.not_modelled)}): {', '.join(rep.not_modelled)}")
    lines.append(f"{len(rep.flagged)} pair(s) differ from stock by more than the sum of the two alone"
                 + (": " + ", ".join(f"{p.a} + {p.b}" for p in rep.flagged) if rep.flagged else ""))
    return "\n".join(lines)
