"""Statistics for A3R campaigns: learning-curve scores, small-sample t intervals and per-shape verdicts.

Pure functions over plain data (no store, no leader types), so every decision and every reported number
can be recomputed from the runs and checked by hand.
"""

from a3r.analysis.curves import CurveScore, score_curve
from a3r.analysis.evidence import (
    ArmStats,
    BestResult,
    CompareResult,
    EffectResult,
    Evidence,
    LevelEvidence,
    Question,
    RunObs,
    ThresholdResult,
    analyse,
    best_arm,
    compare_arms,
    dominated_arms,
    effect_of,
    fmt,
    summarise_arms,
    threshold,
    untrained_level,
)
from a3r.analysis.stats import (
    Interval,
    binomial_sd,
    look_level,
    overlaps,
    seeds_for_best,
    seeds_for_effect,
    t_interval,
    welch_interval,
)

__all__ = [
    "ArmStats",
    "BestResult",
    "CompareResult",
    "CurveScore",
    "EffectResult",
    "Evidence",
    "Interval",
    "LevelEvidence",
    "Question",
    "RunObs",
    "ThresholdResult",
    "analyse",
    "best_arm",
    "binomial_sd",
    "compare_arms",
    "dominated_arms",
    "effect_of",
    "fmt",
    "look_level",
    "overlaps",
    "score_curve",
    "seeds_for_best",
    "seeds_for_effect",
    "summarise_arms",
    "t_interval",
    "threshold",
    "untrained_level",
    "welch_interval",
]
