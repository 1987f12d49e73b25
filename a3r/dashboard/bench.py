"""The benchmark x commit view: every stored `BenchResult` and every `a3r bench` measurement (first
round, read with `a3r.bench.store.measurements`; one benchmark per suite/benchmark/metric) as a matrix of
benchmarks by commits, and a regression table of each benchmark's latest commit against the one before.

`bench_view` is the only code that reads benchmark results for the dashboard, and `bench_matrix` the only
code that shapes them, so when the benchmark store grows (noise-aware comparisons, more fields) this
module is the one place to adapt. Cells are the mean
of a commit's repeats; the heatmap colour is that mean relative to the benchmark's median over commits,
so benchmarks in different units share one scale. Whether up is good depends on the benchmark: the
table shows the direction (a measurement's own; a `BenchResult`'s by its name, see `lower_is_better`) and flags changes beyond twice the repeats'
spread within a commit ("no repeats" when a commit was measured once).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from a3r.dashboard.queries import lower_is_better
from a3r.store import BenchResult, Store

__all__ = ["bench_matrix", "bench_view"]


@dataclass(frozen=True)
class _Point:
    """One `a3r bench` measurement in the shape of a `BenchResult`, with its metric's own direction."""

    suite: str
    name: str
    value: float
    unit: str
    commit: str
    ts: float
    direction: str


def _bench_points(store: Store) -> list[_Point]:
    if store.version < 2:  # a store written before the bench tables existed
        return []
    from a3r.bench.store import measurements

    return [
        _Point(m.suite, f"{m.benchmark}/{m.metric}", m.value, m.unit, m.commit[:10], m.commit_time, m.direction)
        for m in measurements(store, rounds=[0])
        if m.value is not None
    ]


def bench_view(stores: Iterable[Store]) -> dict[str, Any]:
    """The benchmark matrix over every result in `stores` (`BenchResult` rows and bench measurements)."""
    return bench_matrix(r for store in stores for r in [*store.bench_results(), *_bench_points(store)])


def bench_matrix(results: Iterable[BenchResult]) -> dict[str, Any]:
    """{commits, benchmarks, cells, regressions} from benchmark results (any order, any stores).

    commits: in order of first appearance (time); benchmarks: "suite/name"; cells: [commit index,
    benchmark index, mean, mean / benchmark median, repeats, unit]; regressions: one row per benchmark
    measured on two or more commits, latest vs previous commit.
    """
    results = sorted(results, key=lambda r: r.ts)
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    lower: dict[str, bool] = {}  # a measurement knows its direction; a BenchResult goes by its name
    commits: list[str] = []
    for r in results:
        commit = r.commit or "(no commit)"
        bench = f"{r.suite}/{r.name}"
        if commit not in commits:
            commits.append(commit)
        values[(bench, commit)].append(r.value)
        units.setdefault(bench, r.unit)
        direction = getattr(r, "direction", None)
        lower.setdefault(bench, direction == "lower" if direction else lower_is_better(bench))
    benchmarks = sorted(units)
    cells, regressions = [], []
    for j, bench in enumerate(benchmarks):
        means = {c: statistics.fmean(values[(bench, c)]) for c in commits if (bench, c) in values}
        median = statistics.median(means.values())
        for i, c in enumerate(commits):
            if c in means:
                rel = means[c] / median if median else None
                cells.append([i, j, means[c], rel, len(values[(bench, c)]), units[bench]])
        seen = [c for c in commits if c in means]
        if len(seen) >= 2:
            prev, last = seen[-2], seen[-1]
            change = (means[last] - means[prev]) / abs(means[prev]) if means[prev] else None
            # noise: the repeats' own spread within each commit (a shift between commits must not count)
            within = [
                statistics.stdev(values[(bench, c)]) for c in (prev, last) if len(values[(bench, c)]) > 1
            ]
            noise = statistics.fmean(within) if within else None
            worse = (means[last] > means[prev]) if lower[bench] else (means[last] < means[prev])
            if noise is None:
                verdict = "no repeats"
            elif abs(means[last] - means[prev]) > 2 * noise:
                verdict = "regression" if worse else "improvement"
            else:
                verdict = "within noise"
            regressions.append(
                {
                    "benchmark": bench,
                    "unit": units[bench],
                    "previous_commit": prev,
                    "commit": last,
                    "previous": means[prev],
                    "latest": means[last],
                    "change": change,
                    "lower_is_better": lower[bench],
                    "verdict": verdict,
                }
            )
    return {"commits": commits, "benchmarks": benchmarks, "cells": cells, "regressions": regressions}
