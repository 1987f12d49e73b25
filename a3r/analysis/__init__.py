"""Statistics for A3R campaigns: learning-curve scores, bootstrap intervals and per-shape verdicts.

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
)
from a3r.analysis.stats import Interval, bootstrap_ci, diff_ci, overlaps

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
    "bootstrap_ci",
    "compare_arms",
    "diff_ci",
    "dominated_arms",
    "effect_of",
    "fmt",
    "overlaps",
    "score_curve",
    "summarise_arms",
    "threshold",
]
