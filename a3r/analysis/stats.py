"""Small-sample intervals for A3R campaigns: Student-t for one arm, Welch for two, binomial for an eval set.

A campaign has a handful of seeds per arm (3 to 6), so intervals must say how little that is: the t
quantile for n = 3 at 95% is 4.3, not the 1.96 a bootstrap or normal interval pretends. Every interval
here is exact for normal data and honest for bounded scores at these sizes; none is narrower than the
data allow (a percentile bootstrap of two values is just those two values, which is why it is gone).

`floor_sd` guards the degenerate case the seeds cannot see: greedy evaluation of the same model on the
same items gives identical scores on every seed, and a zero standard deviation would claim certainty
that a score quantised in steps of 1/m does not have. `resolution_sd(m) = 1/m` (one item's worth) is
the floor the analysis uses: the held-out set is fixed and shared by every arm, so its own sampling
noise cancels in paired comparisons (`binomial_sd` is kept for the untrained level's interval, which is
about the task, not the set).

Deterministic and pure: no randomness, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

__all__ = [
    "Interval",
    "binomial_sd",
    "look_level",
    "resolution_sd",
    "overlaps",
    "seeds_for_best",
    "seeds_for_effect",
    "t_interval",
    "welch_interval",
    "welch_power",
]


@dataclass(frozen=True)
class Interval:
    """A mean and its confidence interval from `n` observations (lo/hi infinite when undefined)."""

    mean: float
    lo: float
    hi: float
    n: int
    level: float = 0.95

    @property
    def defined(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def overlaps(self, other: Interval) -> bool:
        return overlaps(self, other)

    def scaled(self, f: float) -> Interval:
        """The interval of f times the quantity (f >= 0); f = 0 is exactly 0, even for an undefined one."""
        if f == 0:
            return Interval(0.0, 0.0, 0.0, self.n, self.level)
        return Interval(self.mean * f, self.lo * f, self.hi * f, self.n, self.level)

    def as_dict(self) -> dict:
        """JSON-safe: undefined bounds become None."""
        return {
            "mean": self.mean,
            "lo": self.lo if math.isfinite(self.lo) else None,
            "hi": self.hi if math.isfinite(self.hi) else None,
            "n": self.n,
            "level": self.level,
        }


def overlaps(a: Interval, b: Interval) -> bool:
    """True when the intervals share a point. Touching counts as overlap."""
    return a.lo <= b.hi and b.lo <= a.hi


def _check(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("need a non-empty 1-D sequence of scores")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"scores must be finite, got {list(values)}")
    return x


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")


def binomial_sd(p: float, m: int) -> float:
    """Sampling sd of an accuracy measured on m items, with p clipped to [1/m, 1 - 1/m] so that 0% and
    100% still carry the uncertainty of a finite set."""
    if m < 1:
        raise ValueError(f"need at least one evaluation item, got {m}")
    q = min(max(p, 1.0 / m), 1.0 - 1.0 / m) if m > 1 else 0.5
    return math.sqrt(q * (1.0 - q) / m)


def resolution_sd(m: int) -> float:
    """One item's worth of an accuracy on m items: the smallest spread a quantised score can claim."""
    if m < 1:
        raise ValueError(f"need at least one evaluation item, got {m}")
    return 1.0 / m


def look_level(alpha: float, looks: int, comparisons: int = 1) -> float:
    """Confidence level of one decision when `alpha` is spent over `looks` planned looks and
    `comparisons` simultaneous comparisons per look (Bonferroni: alpha / (looks * comparisons))."""
    if not 0 < alpha < 1 or looks < 1 or comparisons < 1:
        raise ValueError(
            f"need 0 < alpha < 1, looks >= 1, comparisons >= 1; got {alpha}, {looks}, {comparisons}"
        )
    return 1.0 - alpha / (looks * comparisons)


def t_interval(values: Sequence[float], *, level: float = 0.95, floor_sd: float = 0.0) -> Interval:
    """mean +- t(1-(1-level)/2, n-1) * sd / sqrt(n); sd is at least `floor_sd`. Undefined for n < 2."""
    _check_level(level)
    x = _check(values)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, -math.inf, math.inf, int(x.size), level)
    sd = max(float(x.std(ddof=1)), floor_sd)
    if sd == 0.0:  # identical scores and no known measurement noise: no honest interval
        return Interval(mean, -math.inf, math.inf, int(x.size), level)
    half = float(_st.t.ppf(1 - (1 - level) / 2, x.size - 1)) * sd / math.sqrt(x.size)
    return Interval(mean, mean - half, mean + half, int(x.size), level)


def welch_interval(
    a: Sequence[float],
    b: Sequence[float],
    *,
    level: float = 0.95,
    scale_b: float = 1.0,
    floor_sd_a: float = 0.0,
    floor_sd_b: float = 0.0,
) -> Interval:
    """Interval of mean(a) - scale_b * mean(b) with Welch's unequal-variance t (Satterthwaite df).

    `scale_b` tests against a fraction of b ("keeps half of the reference gain": a - 0.5 b > 0).
    Undefined when either group has fewer than 2 values or both variances are 0.
    """
    _check_level(level)
    xa, xb = _check(a), _check(b)
    mean = float(xa.mean() - scale_b * xb.mean())
    n = int(min(xa.size, xb.size))
    if xa.size < 2 or xb.size < 2:
        return Interval(mean, -math.inf, math.inf, n, level)
    va = max(float(xa.var(ddof=1)), floor_sd_a**2) / xa.size
    vb = scale_b**2 * max(float(xb.var(ddof=1)), floor_sd_b**2) / xb.size
    se2 = va + vb
    if se2 == 0.0:
        return Interval(mean, -math.inf, math.inf, n, level)
    df = se2**2 / ((va**2 / (xa.size - 1) if va else 0.0) + (vb**2 / (xb.size - 1) if vb else 0.0))
    half = float(_st.t.ppf(1 - (1 - level) / 2, df)) * math.sqrt(se2)
    return Interval(mean, mean - half, mean + half, n, level)


def welch_power(sigma: float, effect: float, n: int, *, level: float = 0.95) -> float:
    """Power of the two-sided two-sample t test with n seeds per arm to detect `effect` (noncentral t)."""
    df = 2 * n - 2
    crit = float(_st.t.ppf(1 - (1 - level) / 2, df))
    nc = effect / (sigma * math.sqrt(2.0 / n))
    return float(1 - _st.nct.cdf(crit, df, nc) + _st.nct.cdf(-crit, df, nc))


def seeds_for_effect(
    sigma: float, effect: float, *, level: float = 0.95, power: float = 0.8, most: int = 64
) -> int:
    """Seeds per arm for a two-sample t test at confidence `level` (already adjusted for looks and
    comparisons) to detect `effect` with `power`. The normal-theory rule n = 15.7 sigma^2 / d^2 (5%, 80%)
    is too optimistic at 3 to 6 seeds, where the t quantile is large, so this searches the exact
    noncentral-t power instead. At least 2; `most` when even that is not enough."""
    if effect <= 0 or sigma <= 0:
        raise ValueError(f"effect and sigma must be > 0, got {effect}, {sigma}")
    for n in range(2, most + 1):
        if welch_power(sigma, effect, n, level=level) >= power:
            return n
    return most


def seeds_for_best(
    sigma: float, effect: float, arms: int, *, alpha: float = 0.05, looks: int = 1, power: float = 0.8
) -> int:
    """Seeds per arm for "best of `arms`" to name the arm better by `effect` with `power`: it must win
    all arms - 1 Bonferroni-adjusted comparisons, so each is sized for power 1 - (1 - power) / (arms - 1)."""
    k = max(1, arms - 1)
    return seeds_for_effect(sigma, effect, level=look_level(alpha, looks, k), power=1 - (1 - power) / k)
