"""Noise-aware statistics for regression benchmarks: pure functions over plain numbers.

Two questions, two tools:

- **Did commit B regress against commit A on this metric?** (`compare_metric`) A one-sided test over
  seeds in the metric's worse direction *and* a minimum effect, both required. The test is Welch's t
  (the difference's interval at level 1 - 2 alpha, from `a3r.analysis.stats.welch_interval`, must lie
  entirely on the worse side of 0) or a one-sided Mann-Whitney U (p <= alpha). The point estimate of
  the change must also be at least the metric's minimum effect (absolute, or a fraction of A's mean).
  With 3 seeds a test alone makes a 1% slowdown "significant" on a quiet machine; the minimum effect
  is what makes the verdict worth acting on.

- **Where in a commit history did a metric step?** (`detect_change_points`) A piecewise-constant fit by
  binary segmentation: the split of the commit sequence that maximises the between-segment sum of
  squares, n1 n2 / n (m1 - m2)^2, is tested by permutation (commits, with all their seeds, shuffled;
  p = (1 + #{T_perm >= T_obs}) / (1 + n_perm)), kept when p <= alpha and |m2 - m1| >= min_effect, and
  each side is searched again. On a history without any change the first test rejects with probability
  at most alpha, so alpha is the false-alarm rate per metric history. Permuting whole commits (not single
  values) keeps a commit's seeds together: measurements of one commit share its machine conditions.

Deliberately not here: multiple-comparison correction across metrics (each metric has its own alarm rate,
and a regression is only reported after a confirming rerun), and E-divisive's distribution-free
statistic (a piecewise-constant mean is what a regression looks like here, and its test is cheaper).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
from scipy import stats as _st

from a3r.analysis.stats import Interval, t_interval, welch_interval
from a3r.bench.suite import Direction, MetricSpec, StatTest

__all__ = [
    "ChangePoint",
    "MetricComparison",
    "Verdict",
    "compare_metric",
    "detect_change_points",
    "min_effect_abs",
    "worse_sign",
]


class Verdict(str, Enum):
    """Outcome of comparing a candidate commit with a baseline on one metric."""

    REGRESSION = "regression"  # significantly worse by at least the minimum effect
    IMPROVEMENT = "improvement"  # significantly better by at least the minimum effect
    NO_CHANGE = "no_change"  # neither (including changes smaller than the minimum effect)
    INCONCLUSIVE = "inconclusive"  # fewer than 2 values on a side: no test possible


def worse_sign(direction: Direction) -> int:
    """+1 when an increase is worse (lower is better), -1 when a decrease is worse."""
    return 1 if direction is Direction.LOWER else -1


def min_effect_abs(spec: MetricSpec, baseline_mean: float) -> float:
    """The minimum effect in the metric's unit (a relative one scales with the baseline's magnitude)."""
    return spec.min_effect * abs(baseline_mean) if spec.relative else spec.min_effect


@dataclass(frozen=True)
class MetricComparison:
    """Baseline A vs candidate B on one metric; `delta` is the interval of mean(B) - mean(A)."""

    metric: str
    unit: str
    direction: Direction
    baseline: Interval
    candidate: Interval
    delta: Interval
    rel_delta: float | None  # (mean B - mean A) / |mean A|; None when A's mean is 0
    p_worse: float | None  # one-sided p-value of "B is worse" (Welch t without sd floors, or Mann-Whitney)
    threshold: float  # minimum effect in the metric's unit
    verdict: Verdict

    def as_dict(self) -> dict:
        return {
            "metric": self.metric,
            "unit": self.unit,
            "direction": self.direction.value,
            "baseline": self.baseline.as_dict(),
            "candidate": self.candidate.as_dict(),
            "delta": self.delta.as_dict(),
            "rel_delta": self.rel_delta,
            "p_worse": self.p_worse,
            "threshold": self.threshold,
            "verdict": self.verdict.value,
        }


def _one_sided_p(a: np.ndarray, b: np.ndarray, sign: int, test: StatTest) -> float | None:
    """p-value of "b - a lies on the side `sign`" (sign +1: b larger) under `test`; None if undefined."""
    alt = "greater" if sign > 0 else "less"
    if test is StatTest.MANN_WHITNEY:
        return float(_st.mannwhitneyu(b, a, alternative=alt).pvalue)
    if a.var(ddof=1) == 0 and b.var(ddof=1) == 0:
        return None
    return float(_st.ttest_ind(b, a, equal_var=False, alternative=alt).pvalue)


def compare_metric(
    spec: MetricSpec,
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    alpha: float = 0.05,
    test: StatTest = StatTest.WELCH,
) -> MetricComparison:
    """Compare candidate values (one per seed) with baseline values on one metric.

    REGRESSION needs both: the one-sided test at `alpha` in the worse direction, and a point estimate
    worse by at least the minimum effect. IMPROVEMENT is the mirror image."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    level = 1 - 2 * alpha  # a two-sided interval at 1 - 2 alpha is a one-sided test at alpha per side
    floor = spec.resolution
    base_i = t_interval(a, level=level, floor_sd=floor)
    cand_i = t_interval(b, level=level, floor_sd=floor)
    delta = welch_interval(b, a, level=level, floor_sd_a=floor, floor_sd_b=floor)
    rel = float(delta.mean / abs(a.mean())) if a.mean() != 0 else None
    threshold = min_effect_abs(spec, float(a.mean()))
    sign = worse_sign(spec.direction)
    if a.size < 2 or b.size < 2:
        return MetricComparison(
            spec.name,
            spec.unit,
            spec.direction,
            base_i,
            cand_i,
            delta,
            rel,
            None,
            threshold,
            Verdict.INCONCLUSIVE,
        )
    p_worse = _one_sided_p(a, b, sign, test)

    def significant(side: int) -> bool:
        if test is StatTest.MANN_WHITNEY:
            p = p_worse if side == sign else _one_sided_p(a, b, side, test)
            return p is not None and p <= alpha
        return delta.defined and (delta.lo > 0 if side > 0 else delta.hi < 0)

    change = sign * delta.mean  # > 0: worse
    if significant(sign) and change >= threshold:
        verdict = Verdict.REGRESSION
    elif significant(-sign) and -change >= threshold:
        verdict = Verdict.IMPROVEMENT
    else:
        verdict = Verdict.NO_CHANGE
    return MetricComparison(
        spec.name, spec.unit, spec.direction, base_i, cand_i, delta, rel, p_worse, threshold, verdict
    )


# -- change points -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChangePoint:
    """A step in a metric's history: commits [.., index) have mean `before`, [index, ..) mean `after`
    (means of the two segments that the split separated)."""

    index: int
    before: float
    after: float
    p_value: float

    @property
    def delta(self) -> float:
        return self.after - self.before


def _split_stats(sums_PC: np.ndarray, counts_PC: np.ndarray) -> np.ndarray:
    """Between-segment sum of squares for every split k = 1..C-1 (first k commits vs the rest): (P, C-1)."""
    cs = np.cumsum(sums_PC, axis=1)[:, :-1]
    cn = np.cumsum(counts_PC, axis=1)[:, :-1]
    total_s = sums_PC.sum(axis=1, keepdims=True)
    total_n = counts_PC.sum(axis=1, keepdims=True)
    m1 = cs / cn
    m2 = (total_s - cs) / (total_n - cn)
    return cn * (total_n - cn) / total_n * (m1 - m2) ** 2


def _best_split(
    sums_C: np.ndarray, counts_C: np.ndarray, min_size: int, n_perm: int, rng: np.random.Generator
) -> tuple[int, float] | None:
    """(k, p) of the best split of one segment, or None if it is too short to split."""
    C = sums_C.size
    if C < 2 * min_size:
        return None
    lo, hi = min_size - 1, C - min_size  # columns of splits k = min_size .. C - min_size
    obs = _split_stats(sums_C[None, :], counts_C[None, :])[0, lo:hi]
    k = int(np.argmax(obs)) + min_size
    perms_PC = np.argsort(rng.random((n_perm, C)), axis=1)
    null = _split_stats(sums_C[perms_PC], counts_C[perms_PC])[:, lo:hi].max(axis=1)
    # a tolerance so ties from identical permutations (the identity among them) count as "as large"
    p = (1 + int(np.sum(null >= obs.max() * (1 - 1e-12)))) / (1 + n_perm)
    return k, p


def detect_change_points(
    groups: Sequence[Sequence[float]],
    *,
    alpha: float = 0.05,
    min_effect: float = 0.0,
    n_perm: int = 199,
    min_size: int = 1,
    seed: int = 0,
) -> list[ChangePoint]:
    """Steps in a history of commits, oldest first; `groups[c]` holds commit c's values (its seeds).

    Binary segmentation with a permutation test per split (see the module docstring). Returns change
    points sorted by index; empty when the history is constant within noise. `n_perm` bounds the
    smallest p-value at 1 / (n_perm + 1), so it must be at least 1/alpha - 1."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if n_perm + 1 < 1 / alpha:
        raise ValueError(
            f"n_perm={n_perm} cannot reach p <= {alpha}; use at least {math.ceil(1 / alpha) - 1}"
        )
    if any(len(g) == 0 for g in groups):
        raise ValueError("every commit needs at least one value (leave unmeasured commits out)")
    sums_C = np.array([float(np.sum(g)) for g in groups])
    counts_C = np.array([float(len(g)) for g in groups])
    if not np.all(np.isfinite(sums_C)):
        raise ValueError("values must be finite")
    rng = np.random.default_rng(seed)
    found: list[ChangePoint] = []
    todo = [(0, len(groups))]
    while todo:
        lo, hi = todo.pop()
        best = _best_split(sums_C[lo:hi], counts_C[lo:hi], min_size, n_perm, rng)
        if best is None:
            continue
        k, p = best
        before = sums_C[lo : lo + k].sum() / counts_C[lo : lo + k].sum()
        after = sums_C[lo + k : hi].sum() / counts_C[lo + k : hi].sum()
        if p <= alpha and abs(after - before) >= min_effect:
            found.append(ChangePoint(lo + k, float(before), float(after), p))
            todo += [(lo, lo + k), (lo + k, hi)]
    return sorted(found, key=lambda c: c.index)
