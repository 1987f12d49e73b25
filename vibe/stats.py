"""Reward statistics of a dry run (pure): per-component mean/std, group spread, range checks."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

__all__ = ["component_stats", "group_spreads", "mean_std"]


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
