"""Comparing commits from stored measurements: `compare`, `check` (with confirming reruns), change points
across the history, and `bisect`.

`compare_commits` and `history_change_points` only read the store. `check` and `bisect` also measure,
through a `BenchRunner`: `check` reruns every suspected regression with fresh seeds (on both commits)
and reports it only if every rerun agrees on its own data, so one noisy round, or a neighbour hogging
the CPU during one commit's runs, does not page anyone. `bisect_first_bad` is the pure search.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from a3r.bench.checkout import CommitInfo
from a3r.bench.runner import BenchRunner
from a3r.bench.stats import (
    ChangePoint,
    MetricComparison,
    Verdict,
    compare_metric,
    detect_change_points,
    min_effect_abs,
)
from a3r.bench.store import Measurement, measurements
from a3r.bench.suite import Suite
from a3r.exceptions import BenchError, ConfigError
from a3r.store import Store

__all__ = [
    "CheckResult",
    "Finding",
    "HistoryChange",
    "bisect_first_bad",
    "check",
    "compare_commits",
    "history_change_points",
    "values_by_cell",
]

Cell = tuple[str, str]  # (benchmark, metric)


def values_by_cell(rows: Sequence[Measurement]) -> dict[Cell, dict[str, list[float]]]:
    """(benchmark, metric) -> commit -> values (one per seed and round), skipping unmeasured (None)."""
    out: dict[Cell, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in rows:
        if m.value is not None:
            out[(m.benchmark, m.metric)][m.commit].append(m.value)
    return out


@dataclass(frozen=True)
class Finding:
    """The comparison of one metric of one benchmark between a baseline and a candidate commit."""

    benchmark: str
    comparison: MetricComparison

    @property
    def metric(self) -> str:
        return self.comparison.metric


def compare_commits(
    store: Store, suite: Suite, baseline: str, candidate: str, *, rounds: Sequence[int] = (0,)
) -> list[Finding]:
    """Every metric of the suite measured at both commits (in the given rounds), compared."""
    rows = measurements(store, suite=suite.name, commits=[baseline, candidate], rounds=rounds)
    cells = values_by_cell(rows)
    out = []
    for bench in suite.benchmarks:
        for spec in bench.metrics:
            by_commit = cells.get((bench.name, spec.name), {})
            a, b = by_commit.get(baseline, []), by_commit.get(candidate, [])
            if a and b:
                out.append(
                    Finding(bench.name, compare_metric(spec, a, b, alpha=suite.alpha, test=suite.test))
                )
    return out


@dataclass(frozen=True)
class HistoryChange:
    """A change point in one metric's history, with the commit that starts the new level."""

    benchmark: str
    metric: str
    commit: str
    point: ChangePoint
    regression: bool  # the step goes the worse way


def history_change_points(store: Store, suite: Suite, *, n_perm: int = 199) -> list[HistoryChange]:
    """Change points of every (benchmark, metric) across the measured commits (round 0, oldest first).
    The minimum effect is the metric's own (relative ones scaled by the first commit's mean)."""
    rows = measurements(store, suite=suite.name, rounds=[0])
    order: dict[str, None] = {}
    for m in rows:
        order.setdefault(m.commit)
    commits = list(order)
    out = []
    for (bname, mname), by_commit in sorted(values_by_cell(rows).items()):
        try:
            spec = suite.metric(bname, mname)
        except ConfigError:  # a metric the suite no longer has
            continue
        hist = [c for c in commits if by_commit.get(c)]
        if len(hist) < 3:
            continue
        groups = [by_commit[c] for c in hist]
        first = sum(groups[0]) / len(groups[0])
        cps = detect_change_points(
            groups, alpha=suite.alpha, min_effect=min_effect_abs(spec, first), n_perm=n_perm
        )
        sign = 1 if spec.direction.value == "lower" else -1
        for cp in cps:
            out.append(HistoryChange(bname, mname, hist[cp.index], cp, sign * cp.delta > 0))
    return out


@dataclass
class CheckResult:
    """What `check` found: first-round findings, and the regressions that every rerun confirmed."""

    baseline: str
    candidate: str
    findings: list[Finding] = field(default_factory=list)
    suspected: list[Finding] = field(default_factory=list)
    confirmed: list[Finding] = field(default_factory=list)
    reruns: list[list[Finding]] = field(default_factory=list)  # per confirming round, the findings rerun

    @property
    def regressed(self) -> bool:
        return bool(self.confirmed)


def check(
    runner: BenchRunner, baseline: CommitInfo, candidate: CommitInfo, *, timeout: float | None = None
) -> CheckResult:
    """Measure both commits if needed, compare them, and confirm each suspected regression by rerunning
    its benchmark on both commits with fresh seeds (`suite.confirm_reruns` times; all must agree)."""
    suite, store = runner.suite, runner.ws.store
    if baseline.sha == candidate.sha:
        raise BenchError(
            f"baseline and candidate are the same commit {candidate.short}; give another --baseline"
        )
    runner.run([baseline, candidate], timeout=timeout)
    res = CheckResult(baseline.sha, candidate.sha)
    res.findings = compare_commits(store, suite, baseline.sha, candidate.sha)
    res.suspected = [f for f in res.findings if f.comparison.verdict is Verdict.REGRESSION]
    still = list(res.suspected)
    for rnd in range(1, suite.confirm_reruns + 1):
        if not still:
            break
        benches = sorted({f.benchmark for f in still})
        runner.say(
            f"confirming {len(still)} suspected regression(s) in {benches}: rerun {rnd} with fresh seeds"
        )
        runner.run([baseline, candidate], benchmarks=benches, rnd=rnd, timeout=timeout)
        again = {
            (f.benchmark, f.metric): f
            for f in compare_commits(store, suite, baseline.sha, candidate.sha, rounds=[rnd])
        }
        res.reruns.append([again[(f.benchmark, f.metric)] for f in still if (f.benchmark, f.metric) in again])
        still = [
            f
            for f in still
            if (g := again.get((f.benchmark, f.metric))) and g.comparison.verdict is Verdict.REGRESSION
        ]
    res.confirmed = still
    return res


def bisect_first_bad(
    commits: Sequence[str], is_bad: Callable[[str], bool]
) -> tuple[str, list[tuple[str, bool]]]:
    """The first bad commit of `commits` (oldest first; the first is known good and the last known bad),
    by binary search; also returns the (commit, bad) verdicts it measured, in order."""
    if len(commits) < 2:
        raise ValueError("bisect needs a good and a bad commit")
    lo, hi = 0, len(commits) - 1  # invariant: commits[lo] good, commits[hi] bad
    seen: list[tuple[str, bool]] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        bad = is_bad(commits[mid])
        seen.append((commits[mid], bad))
        if bad:
            hi = mid
        else:
            lo = mid
    return commits[hi], seen
