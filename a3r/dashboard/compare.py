"""Comparing runs against their config values: each run's score (final value or area under its curve),
the score per value of each varied config key with a 95% Student t interval, and a parameter-importance
estimate that says how much it can be trusted.

Importance is the share of the score's variance that one parameter's values explain on their own
(eta squared of a one-way analysis of variance), with a permutation p-value: how often shuffling the
runs' values explains as much. It sees no interactions, is computed only with `MIN_RUNS_FOR_IMPORTANCE`
scored runs or more, and a parameter that never repeats a value (each run its own value) is left out,
since any such split explains all the variance. Pure functions, deterministic (seeded shuffles).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import numpy as np

from a3r.analysis.stats import t_interval

__all__ = [
    "MIN_RUNS_FOR_IMPORTANCE",
    "PERMUTATIONS",
    "Summary",
    "eta_squared",
    "importance",
    "permutation_p",
    "score",
    "scores_by_value",
]

MIN_RUNS_FOR_IMPORTANCE = 8
PERMUTATIONS = 2000


class Summary(str, Enum):
    """How a run's curve becomes one number."""

    FINAL = "final"  # the value at the last logged step
    AUC = "auc"  # area under the curve over its step span, divided by that span (the curve's mean level)


def score(points: Sequence[tuple[int, float | None]], how: Summary) -> float | None:
    """One number for a run's (step, value) points, by step; None when it logged no finite value."""
    pts = [(s, v) for s, v in points if v is not None and math.isfinite(v)]
    if not pts:
        return None
    if how is Summary.FINAL or len(pts) == 1:
        return pts[-1][1]
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in zip(pts, pts[1:], strict=False))
    span = pts[-1][0] - pts[0][0]
    return area / span if span else pts[-1][1]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def scores_by_value(values: Sequence[Any], scores: Sequence[float]) -> list[dict[str, Any]]:
    """Per distinct config value (in sorted order): n, mean and a 95% t interval (lo/hi None for n < 2
    or identical scores, where no honest interval exists) and the scores themselves."""
    groups: dict[str, list[float]] = defaultdict(list)
    raw: dict[str, Any] = {}
    for v, s in zip(values, scores, strict=True):
        groups[_key(v)].append(s)
        raw[_key(v)] = v
    out = []
    for k in sorted(groups, key=lambda k: (isinstance(raw[k], str), raw[k] if raw[k] is not None else "", k)):
        iv = t_interval(groups[k])
        finite = math.isfinite(iv.lo) and math.isfinite(iv.hi)
        out.append(
            {
                "value": raw[k],
                "n": iv.n,
                "mean": iv.mean,
                "lo": iv.lo if finite else None,
                "hi": iv.hi if finite else None,
                "scores": list(groups[k]),
            }
        )
    return out


def eta_squared(labels: Sequence[str], scores: Sequence[float]) -> float | None:
    """Between-group sum of squares over the total: the share of variance the labels explain (None when
    the scores do not vary)."""
    n = len(scores)
    mean = sum(scores) / n
    total = sum((s - mean) ** 2 for s in scores)
    if total == 0:
        return None
    groups: dict[str, list[float]] = defaultdict(list)
    for label, s in zip(labels, scores, strict=True):
        groups[label].append(s)
    between = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values())
    return between / total


def permutation_p(
    labels: Sequence[str], scores: Sequence[float], n: int = PERMUTATIONS, seed: int = 0
) -> float:
    """How often a random reassignment of `labels` to the runs explains at least as much variance
    ((k + 1) / (n + 1), so never 0). Shuffling the scores against fixed labels is the same test."""
    observed = eta_squared(labels, scores)
    if observed is None:
        return 1.0
    x = np.asarray(scores, dtype=float)
    codes = np.unique(np.asarray(labels), return_inverse=True)[1]
    members = [codes == g for g in range(codes.max() + 1)]
    shuffled = np.random.default_rng(seed).permuted(np.tile(x, (n, 1)), axis=1)
    total = float(((x - x.mean()) ** 2).sum())
    between = sum(m.sum() * (shuffled[:, m].mean(axis=1) - x.mean()) ** 2 for m in members)
    # tolerance: a relabelling that explains exactly as much may differ in the last bits of the sums
    hits = int((between / total >= observed - 1e-9).sum())
    return (hits + 1) / (n + 1)


def importance(configs: Mapping[str, Sequence[Any]], scores: Sequence[float]) -> dict[str, Any]:
    """{available, reason, rows}: per config key (values per scored run, in the order of `scores`),
    eta squared and its permutation p, most important first; `available` is False with a reason when
    there are too few runs."""
    if len(scores) < MIN_RUNS_FOR_IMPORTANCE:
        return {
            "available": False,
            "reason": f"{len(scores)} scored run(s); importance needs at least {MIN_RUNS_FOR_IMPORTANCE}",
            "rows": [],
        }
    rows, skipped = [], []
    for name, values in configs.items():
        labels = [_key(v) for v in values]
        levels = len(set(labels))
        if levels < 2:
            continue
        if levels == len(labels):
            skipped.append(name)  # no value repeats: any split explains everything
            continue
        eta = eta_squared(labels, scores)
        rows.append({"param": name, "eta_squared": eta, "p": permutation_p(labels, scores), "levels": levels})
    rows.sort(key=lambda r: -(r["eta_squared"] or 0))
    reason = "" if rows else "no varied parameter repeats a value across runs"
    return {"available": bool(rows), "reason": reason, "rows": rows, "skipped": skipped}
