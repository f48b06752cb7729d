"""Paired comparison of two per-question result files (``r9kctl eval compare A B``), over the same questions.

Discordant cells ``b`` (A right, B wrong) and ``c`` (A wrong, B right) decide: the exact two-sided McNemar p
(``b ~ Binomial(b + c, 1/2)`` under the null), with Newcombe's hybrid score interval (method 10) for
``acc(B) - acc(A)`` and an exact Clopper-Pearson interval of ``c / (b + c)`` (notes/evidence.md).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import binom, binomtest

from .results import ResultFile, ResultFileError

# How many example ids a mismatch error names.
_EXAMPLES = 5


@dataclass(frozen=True)
class Comparison:
    a_name: str
    b_name: str
    n: int
    a_correct: int
    b_correct: int
    both_correct: int
    b: int  # A right, B wrong
    c: int  # A wrong, B right
    neither_correct: int
    p_value: float
    confidence: float
    diff: float  # acc(B) - acc(A)
    diff_ci: tuple[float, float]
    discordant_share_ci: tuple[float, float] | None  # exact CI of c / (b + c); None when b + c == 0
    identical: int | None  # questions whose outputs are identical (None: outputs not in both files)
    mdd: float | None = None  # minimum detectable |acc(B) - acc(A)| at alpha / power (None: none detectable)
    mdd_alpha: float = 0.05
    mdd_power: float = 0.8
    dataset: str | None = None
    a_server: dict | None = None  # the active set each server reported (profile, hash), when recorded
    b_server: dict | None = None

    @property
    def a_accuracy(self) -> float:
        return self.a_correct / self.n

    @property
    def b_accuracy(self) -> float:
        return self.b_correct / self.n

    @property
    def identical_share(self) -> float | None:
        return None if self.identical is None else self.identical / self.n

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value < alpha

    def verdict_basis(self, alpha: float = 0.05) -> str:
        """How the verdict was reached, said beside it: the exact McNemar p decides; the CI is shown as well,
        and where it disagrees (it excludes 0 while p >= alpha, or includes 0 while p < alpha) that is said,
        with why the p-value is the one that decides."""
        lo, hi = self.diff_ci
        excludes = lo > 0 or hi < 0
        sig = self.significant(alpha)
        basis = f"the verdict follows the exact McNemar p = {self.p_value:.4g} (alpha {alpha:g})"
        ci = f"{100 * self.confidence:.0f}% CI [{100 * lo:+.2f}, {100 * hi:+.2f}]"
        if excludes and not sig:
            return (f"{basis}; the {ci} excludes 0, but that interval (Newcombe's score method) is an "
                    f"approximation, while the exact test at {self.b + self.c} discordant questions does not "
                    "reject: no difference is established")
        if sig and not excludes:
            return f"{basis}; the {ci} still includes 0 (an approximate interval), the exact test rejects"
        return f"{basis}; the {ci} agrees"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "diff_ci": list(self.diff_ci),
                "discordant_share_ci": None if self.discordant_share_ci is None else list(self.discordant_share_ci),
                "a_accuracy": self.a_accuracy, "b_accuracy": self.b_accuracy, "identical_share": self.identical_share}

    def format_text(self) -> str:
        pct = lambda x: f"{100 * x:.2f}%"  # noqa: E731
        lo, hi = self.diff_ci
        lines = [
            f"questions      {self.n}" + (f"  ({self.dataset})" if self.dataset else ""),
            f"A  {self.a_name:<30} {pct(self.a_accuracy):>8}  ({self.a_correct}/{self.n})",
            f"B  {self.b_name:<30} {pct(self.b_accuracy):>8}  ({self.b_correct}/{self.n})",
            f"discordant     b = {self.b} (A right, B wrong)   c = {self.c} (A wrong, B right)",
            f"McNemar exact  p = {self.p_value:.4g}  (two-sided binomial on {self.b + self.c} discordant)",
            f"B - A          {100 * self.diff:+.2f} points, {100 * self.confidence:.0f}% CI "
            f"[{100 * lo:+.2f}, {100 * hi:+.2f}] (Newcombe paired score)",
        ]
        if self.discordant_share_ci is not None:
            clo, chi = self.discordant_share_ci
            lines.append(f"c / (b + c)    {self.c / (self.b + self.c):.3f}, exact CI [{clo:.3f}, {chi:.3f}]")
        lines.append(f"detectable     {self.mdd_text()}")
        if self.a_server or self.b_server:
            cfg = lambda s: f"{s.get('profile')} @ {s.get('hash')}" if s else "?"  # noqa: E731
            lines.append(f"configs        A: {cfg(self.a_server)}   B: {cfg(self.b_server)}")
        if self.identical is None:
            lines.append("identical      n/a (outputs not recorded in both files)")
        else:
            lines.append(f"identical      {pct(self.identical_share)} of outputs ({self.identical}/{self.n})")
        return "\n".join(lines)

    def mdd_text(self) -> str:
        d = self.b + self.c
        head = f"at n = {self.n}, {d} discordant ({100 * d / self.n:.1f}%), alpha {self.mdd_alpha:g}, " \
               f"power {100 * self.mdd_power:.0f}%: "
        if self.mdd is None:
            need = min_discordant(self.mdd_alpha)
            return head + f"no difference is detectable (the exact test needs >= {need} discordant questions)"
        return head + f"differences of {100 * self.mdd:.2f} points or more ({math.ceil(self.mdd * self.n - 1e-9)} " \
                      "questions); a smaller one would read as 'no detectable difference'"


def _rejection_region(d: int, alpha: float) -> list[int]:
    return [k for k in range(d + 1) if mcnemar_exact_p(k, d - k) < alpha]


def min_discordant(alpha: float = 0.05) -> int:
    """The fewest discordant questions for which some split is significant (6 at alpha 0.05)."""
    d = 1
    while not _rejection_region(d, alpha):
        d += 1
    return d


def minimum_detectable_difference(n: int, discordant: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """Smallest |acc(B) - acc(A)| the exact McNemar test detects with ``power`` at ``n`` questions and
    ``discordant`` discordant ones (see the module doc); None when no split of them is significant."""
    if n <= 0 or discordant <= 0:
        return None
    region = _rejection_region(discordant, alpha)
    if not region:
        return None

    def pw(pi: float) -> float:
        return float(sum(binom.pmf(k, discordant, pi) for k in region))

    if pw(1.0) < power:
        return None
    lo, hi = 0.5, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if pw(mid) >= power else (mid, hi)
    return (2 * hi - 1) * discordant / n


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p: binomial test of b successes in b + c trials at 1/2 (1.0 with none)."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be >= 0")
    if b + c == 0:
        return 1.0
    return float(binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)


def _ci(k: int, n: int, confidence: float, method: str) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method=method)
    return float(ci.low), float(ci.high)


def paired_diff_ci(both: int, b: int, c: int, neither: int, confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe's method-10 interval for p2 - p1, with p1 = acc(A) = (both + b)/n, p2 = acc(B) = (both + c)/n."""
    n = both + b + c + neither
    if n == 0:
        raise ValueError("empty table")
    p1, p2 = (both + b) / n, (both + c) / n
    l1, u1 = _ci(both + b, n, confidence, "wilson")
    l2, u2 = _ci(both + c, n, confidence, "wilson")
    # Correlation of the two paired outcomes (phi), as Newcombe defines it for this method: a positive
    # numerator is shrunk by n/2 (a continuity correction, floored at 0); 0 where a margin is empty.
    denom = (both + b) * (c + neither) * (both + c) * (b + neither)
    num = both * neither - b * c
    if num > 0:
        num = max(0.0, num - n / 2)
    phi = num / math.sqrt(denom) if denom > 0 else 0.0
    theta = p2 - p1
    lower = math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    upper = math.sqrt(max(0.0, (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    return max(-1.0, theta - lower), min(1.0, theta + upper)


def _id_mismatch(a: ResultFile, b: ResultFile) -> str | None:
    ids_a, ids_b = set(a.results), set(b.results)
    if ids_a == ids_b:
        return None
    only_a, only_b = sorted(ids_a - ids_b), sorted(ids_b - ids_a)
    parts = [f"question sets differ: {a.name} has {len(ids_a)}, {b.name} has {len(ids_b)}, "
             f"{len(ids_a & ids_b)} in common"]
    for side, only in (("A", only_a), ("B", only_b)):
        if only:
            parts.append(f"only in {side} ({len(only)}): {', '.join(only[:_EXAMPLES])}"
                         + (" ..." if len(only) > _EXAMPLES else ""))
    return "; ".join(parts)


def compare(a: ResultFile, b: ResultFile, confidence: float = 0.95, alpha: float = 0.05,
            power: float = 0.8) -> Comparison:
    """Compare two result files question by question. Raises ResultFileError on mismatched question sets."""
    mismatch = _id_mismatch(a, b)
    if mismatch:
        raise ResultFileError(f"refusing to compare: {mismatch}")
    ha, hb = a.header.get("dataset_sha256"), b.header.get("dataset_sha256")
    if ha and hb and ha != hb:
        raise ResultFileError(
            f"refusing to compare: same question ids but different question sets "
            f"(dataset_sha256 {ha[:12]} in {a.name} vs {hb[:12]} in {b.name})")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    both = bb = cc = neither = 0
    identical = 0
    have_outputs = True
    for qid, ra in a.results.items():
        rb = b.results[qid]
        if ra.correct and rb.correct:
            both += 1
        elif ra.correct:
            bb += 1
        elif rb.correct:
            cc += 1
        else:
            neither += 1
        if ra.output_sha256 is None or rb.output_sha256 is None:
            have_outputs = False
        elif ra.output_sha256 == rb.output_sha256:
            identical += 1
    n = a.n
    share_ci = _ci(cc, bb + cc, confidence, "exact") if bb + cc else None
    return Comparison(
        a_name=a.name, b_name=b.name, n=n,
        a_correct=both + bb, b_correct=both + cc, both_correct=both, b=bb, c=cc, neither_correct=neither,
        p_value=mcnemar_exact_p(bb, cc), confidence=confidence,
        diff=(cc - bb) / n, diff_ci=paired_diff_ci(both, bb, cc, neither, confidence),
        discordant_share_ci=share_ci, identical=identical if have_outputs else None,
        mdd=minimum_detectable_difference(n, bb + cc, alpha, power), mdd_alpha=alpha, mdd_power=power,
        dataset=a.header.get("dataset") or b.header.get("dataset"),
        a_server=a.header.get("server_r9k"), b_server=b.header.get("server_r9k"),
    )


def discordance_ci(n: int, discordant: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of the discordance rate (b + c) / n."""
    return _ci(discordant, n, confidence, "exact")


def aa_problem(cmp: Comparison) -> str | None:
    """Why two files are not two runs of one profile (their servers reported different active sets), or None."""
    sa, sb = cmp.a_server or {}, cmp.b_server or {}
    if sa.get("hash") and sb.get("hash") and sa["hash"] != sb["hash"]:
        return (f"not an A/A pair: {cmp.a_name} ran {sa.get('profile')} @ {sa['hash']}, "
                f"{cmp.b_name} ran {sb.get('profile')} @ {sb['hash']}")
    return None


def floor_text(cmp: Comparison, label: str = "run-to-run floor") -> str:
    d = cmp.b + cmp.c
    lo, hi = discordance_ci(cmp.n, d, cmp.confidence)
    ident = "" if cmp.identical is None else f", identical outputs {100 * cmp.identical / cmp.n:.1f}%"
    return (f"{label:<14} {d}/{cmp.n} discordant ({100 * d / cmp.n:.2f}%, exact {100 * cmp.confidence:.0f}% CI "
            f"[{100 * lo:.2f}%, {100 * hi:.2f}%]){ident}")
