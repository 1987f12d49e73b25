"""Reward statistics of a dry run (pure): per-component mean/std, group spread, range checks."""

from __future__ import annotations

import math
from collections import defaultdict
from enum import Enum
from typing import Any

__all__ = ["FlatCause", "component_stats", "flat_cause", "group_spreads", "mean_std"]


def mean_std(xs: list[float]) -> tuple[float, float]:
    """Population mean and standard deviation (0, 0 for an empty list)."""
    if not xs:
        return 0.0, 0.0
    m = math.fsum(xs) / len(xs)
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in xs) / len(xs))


def component_stats(episodes: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{component: {"mean", "std"}} over the episodes that returned components, plus "total"."""
    by: dict[str, list[float]] = defaultdict(list)
    for e in episodes:
        comps = e.get("components")
        if comps is None:
            continue
        for k, v in comps.items():
            by[k].append(v)
        by["total"].append(math.fsum(comps.values()))
    return {k: dict(zip(("mean", "std"), mean_std(v), strict=True)) for k, v in by.items()}


def group_spreads(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """{task id: std of its episodes' total rewards}; a std of 0 is a group without learning signal."""
    groups: dict[str, list[float]] = defaultdict(list)
    for e in episodes:
        if e.get("components") is not None:
            groups[e["task_id"]].append(math.fsum(e["components"].values()))
    return {k: mean_std(v)[1] for k, v in groups.items()}


class FlatCause(str, Enum):
    """Why every group of a batch had equal rewards (no advantage, so no learning signal)."""

    NO_REWARD = "no_reward"  # every episode earned reward_min: the model gets nothing right
    SAME_REWARD = "same_reward"  # every episode earned one other value: every reply is paid alike
    NO_VARIATION = "no_variation"  # tasks differ, but each task's episodes agree: replies do not vary


def flat_cause(episodes: list[dict[str, Any]], reward_min: float) -> tuple[FlatCause, float, float] | None:
    """(cause, lowest, highest total) when every group of `episodes` had equal rewards; None when some
    group has a spread (or there are none): flat groups beside varied ones are normal and not reported."""
    spreads = group_spreads(episodes)
    if not spreads or any(s != 0.0 for s in spreads.values()):
        return None
    totals = [math.fsum(e["components"].values()) for e in episodes if e.get("components") is not None]
    lo, hi = min(totals), max(totals)
    if lo != hi:
        return FlatCause.NO_VARIATION, lo, hi
    return (FlatCause.NO_REWARD if lo <= reward_min else FlatCause.SAME_REWARD), lo, hi
