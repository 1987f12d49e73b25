"""Power you can plan on: how many fresh seeds the confirmation needs, and what power a capped budget buys.

The campaign's answer comes from its confirmation stage alone (fresh seeds on the arms the answer rests on,
analysed at the full alpha: `a3r.analysis.analyse(..., confirm_stage=...)`), so the confirmation is the
sample that needs power. It is sized with the rule its analysis uses:
- best of k arms (a "best" goal, and a "compare" or "effect" goal with 3 or more arms, which the analysis
  reads as best): the leader must beat each of the k - 1 others, each at 1 - alpha;
- two arms (compare, effect): one Welch interval at 1 - alpha;
- thresholds (minimum/maximum): the answer must pass and its neighbour fail, two Welch tests at 1 - alpha,
  each sized for power 1 - (1 - power) / 2, with the variance of the harder one: the neighbour's gain
  against `margin` (half) of the reference's, i.e. mean(a) - margin * mean(b);
always with the Welch df the verdicts use (`welch_power`) and an 80% upper confidence bound on sigma
(`sigma_upper`) from every exploration run pooled, never the point estimate of 3 pilot seeds.

Pure functions over numbers; the design (`a3r.leader.design`) and the calibration call them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from a3r.analysis.evidence import MIN_EFFECT
from a3r.analysis.stats import seeds_for_best, seeds_for_effect, sigma_upper, welch_power

__all__ = [
    "TARGET_POWER",
    "SIGMA_CONFIDENCE",
    "ConfirmationSize",
    "analysed_as_best",
    "confirmation_size",
    "pooled_sd",
    "power_at",
]

TARGET_POWER = 0.8
SIGMA_CONFIDENCE = 0.8  # sigma is planned at its one-sided 80% upper confidence bound


def analysed_as_best(shape: str, arms: int) -> bool:
    """Whether the analysis reads this question as "best of `arms`" (see `a3r.analysis.analyse`)."""
    return shape == "best" or (shape in ("compare", "effect") and arms >= 3)


def pooled_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled within-group sd, its degrees of freedom) over groups of per-seed values; groups of one
    value carry no spread and are skipped. (0.0, 0) when no group has two values."""
    df = sum(len(g) - 1 for g in groups if len(g) >= 2)
    if df == 0:
        return 0.0, 0
    ss = 0.0
    for g in groups:
        if len(g) >= 2:
            m = sum(g) / len(g)
            ss += sum((v - m) ** 2 for v in g)
    return math.sqrt(ss / df), df


@dataclass(frozen=True)
class ConfirmationSize:
    """The confirmation's seeds per arm and what they buy."""

    seeds: int  # seeds per arm actually planned (capped)
    needed: int  # seeds per arm for TARGET_POWER (uncapped)
    arms: int
    power: float  # planned power at `seeds` (sigma at its upper bound)
    sigma: float  # the sigma planned with (upper bound)
    effect: float

    @property
    def runs(self) -> int:
        return self.seeds * self.arms

    @property
    def runs_needed(self) -> int:
        return self.needed * self.arms


def power_at(
    shape: str,
    arms: int,
    n: int,
    sigma: float,
    effect: float,
    alpha: float,
    floor_sd: float,
    margin: float = MIN_EFFECT,
) -> float:
    """Planned power of a confirmation with n seeds per arm (the rule its analysis uses): the product of
    the comparisons it needs. A threshold's two tests (answer passes, neighbour fails) involve different
    arms; best-of-k's comparisons share the leader's mean, which makes them positively associated, so the
    product is a lower bound there. (Sizing uses the cruder union bound, which asks a little more.)"""
    if analysed_as_best(shape, arms):
        return welch_power(sigma, effect, n, level=1 - alpha, floor_sd=floor_sd) ** (arms - 1)
    if shape in ("minimum", "maximum"):
        return welch_power(sigma, effect, n, level=1 - alpha, floor_sd=floor_sd, scale_b=margin) ** 2
    return welch_power(sigma, effect, n, level=1 - alpha, floor_sd=floor_sd)


def confirmation_size(
    shape: str,
    arms: int,
    sd: float,
    df: int,
    effect: float,
    *,
    alpha: float,
    min_seeds: int,
    max_seeds: int,
    floor_sd: float = 0.0,
    margin: float = MIN_EFFECT,
    most: int = 64,
) -> ConfirmationSize:
    """Seeds per arm for the confirmation of a question analysed with `arms` arms, from a seed sd `sd`
    measured with `df` degrees of freedom (planned at its upper bound), capped to [min_seeds, max_seeds]."""
    sigma = max(sigma_upper(sd, df + 1, confidence=SIGMA_CONFIDENCE) if df >= 1 else sd, floor_sd, 1e-9)
    if analysed_as_best(shape, arms):
        needed = seeds_for_best(sigma, effect, arms, alpha=alpha, floor_sd=floor_sd, most=most)
    else:
        threshold = shape in ("minimum", "maximum")
        needed = seeds_for_effect(
            sigma,
            effect,
            level=1 - alpha,
            power=1 - (1 - TARGET_POWER) / 2 if threshold else TARGET_POWER,
            floor_sd=floor_sd,
            scale_b=margin if threshold else 1.0,
            most=most,
        )
    seeds = min(max(needed, min_seeds), max_seeds)
    return ConfirmationSize(
        seeds=seeds,
        needed=max(needed, min_seeds),
        arms=arms,
        power=power_at(shape, arms, seeds, sigma, effect, alpha, floor_sd, margin),
        sigma=sigma,
        effect=effect,
    )
