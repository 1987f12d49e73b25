"""From per-run observations to per-arm statistics and a verdict for each question shape.

An *arm* is one configuration: a value `x` of the studied variable at one `level` of the secondary
variable (None without one). Its runs are seeds; only succeeded runs with a finite curve score. Each
shape has one pure decision rule:

- threshold (minimum/maximum): criterion c (absolute, or relative: floor + f * (best - floor), where floor
  is the untrained level = mean initial score of the level's runs). An arm *passes* when its CI lower
  bound >= c, *fails* when its CI upper bound < c, else is *uncertain*. The answer is the smallest
  (largest) passing x; it is *confident* when the adjacent tested x on the other side fails. Nothing
  *trained* unless the best arm's CI lower bound exceeds the floor ("nothing trained" only when even its
  upper bound stays at or below the floor; in between, training is "not established").
- best: the arm with the highest mean; arms whose CIs overlap it are ties; arms whose CI upper bound is
  below its lower bound are dominated.
- compare: bootstrap CI of the difference of means; a tie when it contains 0 (more than two values: best).
- effect: CI of (score at the highest x) - (score at the lowest x); no clear effect when it contains 0.

Verdict sentences are built here from the numbers, so every number a report prints traces to a run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from a3r.analysis.curves import CurveScore, score_curve
from a3r.analysis.stats import Interval, bootstrap_ci, diff_ci, overlaps

__all__ = [
    "ArmStats",
    "BestResult",
    "CompareResult",
    "EffectResult",
    "Evidence",
    "LevelEvidence",
    "Question",
    "RunObs",
    "ThresholdResult",
    "analyse",
    "best_arm",
    "compare_arms",
    "dominated_arms",
    "effect_of",
    "fmt",
    "summarise_arms",
    "threshold",
]


def fmt(x: Any) -> str:
    """Numbers as 3 significant digits ("0.412", "3e-05"); anything else as str."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return "n/a"
    return f"{x:.3g}"


def _ci(iv: Interval) -> str:
    return (
        f"{fmt(iv.mean)} [{fmt(iv.lo)}, {fmt(iv.hi)}]"
        if iv.defined
        else f"{fmt(iv.mean)} (n={iv.n}, no interval)"
    )


@dataclass(frozen=True)
class Question:
    """What the analysis needs to know about the goal (kept free of leader types on purpose)."""

    shape: Literal["minimum", "maximum", "best", "effect", "compare"]
    name: str  # studied variable, for sentences
    statistic: Literal["final", "auc"] = "final"
    metric: str = "reward_mean"
    criterion_kind: Literal["relative", "absolute"] = "relative"
    criterion_value: float = 0.9
    secondary_name: str | None = None


@dataclass(frozen=True)
class RunObs:
    """One run as the leader read it from the store."""

    run_id: int
    stage: int
    seed: int
    x: Any  # value of the studied variable
    level: Any  # value of the secondary variable, or None
    label: str  # arm label
    state: str  # run state (succeeded, failed, cancelled, ...)
    series: tuple[tuple[int, float | None], ...] = ()
    host: str | None = None
    config_hash: str | None = None
    attempts: int = 1

    def score(self) -> CurveScore | None:
        return score_curve(self.series)


@dataclass(frozen=True)
class ArmStats:
    label: str
    x: Any
    level: Any
    interval: Interval  # of the per-seed scores
    scores: tuple[float, ...]
    run_ids: tuple[int, ...]  # succeeded runs that contributed a score
    initial: float  # mean initial level of those runs
    excluded: tuple[int, ...] = ()  # runs of this arm that did not contribute (failed, cancelled, no data)
    diverged: tuple[int, ...] = ()  # contributing runs whose curve had NaN steps

    @property
    def n(self) -> int:
        return len(self.scores)


def summarise_arms(
    obs: Sequence[RunObs], statistic: str, *, seed: int = 0, level: float = 0.95
) -> list[ArmStats]:
    """Group runs by (level, x) and bootstrap each arm's scores. Arms without a scored run are left out."""
    groups: dict[tuple[Any, Any], list[RunObs]] = defaultdict(list)
    for o in obs:
        groups[(o.level, o.x)].append(o)
    out = []
    for (lvl, x), runs in groups.items():
        scored = [(o, s) for o in runs if o.state == "succeeded" and (s := o.score()) is not None]
        if not scored:
            continue
        scores = tuple(s.get(statistic) for _o, s in scored)
        # one seed stream per arm, so adding an unrelated arm never changes this arm's interval
        arm_seed = seed + sum(ord(c) for c in runs[0].label)
        out.append(
            ArmStats(
                label=runs[0].label,
                x=x,
                level=lvl,
                interval=bootstrap_ci(scores, level=level, seed=arm_seed),
                scores=scores,
                run_ids=tuple(o.run_id for o, _s in scored),
                initial=sum(s.initial for _o, s in scored) / len(scored),
                excluded=tuple(o.run_id for o in runs if all(o is not p for p, _s in scored)),
                diverged=tuple(o.run_id for o, s in scored if s.diverged),
            )
        )
    return sorted(out, key=lambda a: (_sort_key(a.level), _sort_key(a.x)))


def _sort_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


# -- threshold ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ThresholdResult:
    direction: Literal["min", "max"]
    criterion: float
    floor: float
    trained: bool
    status: dict[str, str]  # arm label -> pass | fail | uncertain
    answer: ArmStats | None
    neighbour: ArmStats | None  # adjacent tested arm beyond the answer (should fail)
    best: ArmStats  # highest mean score at this level
    confident: bool
    monotone: bool
    verdict: str


def threshold(arms: Sequence[ArmStats], q: Question) -> ThresholdResult:
    """Smallest (minimum) or largest (maximum) x whose score CI lower bound reaches the criterion."""
    if not arms:
        raise ValueError("threshold needs at least one scored arm")
    direction: Literal["min", "max"] = "min" if q.shape == "minimum" else "max"
    order = sorted(arms, key=lambda a: a.x, reverse=direction == "max")  # from the "cheap" end
    floor = sum(a.initial * a.n for a in arms) / sum(a.n for a in arms)
    best = max(arms, key=lambda a: a.interval.mean)
    if q.criterion_kind == "absolute":
        crit = q.criterion_value
    else:
        crit = floor + q.criterion_value * (best.interval.mean - floor)
    trained = best.interval.lo > floor
    status = {
        a.label: "pass" if a.interval.lo >= crit else "fail" if a.interval.hi < crit else "uncertain"
        for a in order
    }
    if not trained and q.criterion_kind == "relative":
        # "keeps 90% of the best gain" means nothing when there is no gain
        status = {a.label: "fail" if a.interval.hi <= floor else "uncertain" for a in order}
    passing = [i for i, a in enumerate(order) if status[a.label] == "pass"]
    answer = order[passing[0]] if passing else None
    neighbour = order[passing[0] - 1] if passing and passing[0] > 0 else None
    confident = answer is not None and (neighbour is None or status[neighbour.label] == "fail")
    monotone = answer is None or all(status[a.label] != "fail" for a in order[passing[0] :])
    word = "smallest" if direction == "min" else "largest"
    stat = f"{q.statistic} {q.metric}"
    if not trained and q.criterion_kind == "relative" and best.interval.hi <= floor:
        verdict = (
            f"Nothing trained: the best arm ({best.label}, {stat} {_ci(best.interval)}) does not rise above the "
            f"untrained level {fmt(floor)}, so no {q.name} can be said to train."
        )
    elif not trained and q.criterion_kind == "relative":
        verdict = (
            f"Training is not established: the best arm's interval ({best.label}, {stat} {_ci(best.interval)}) "
            f"does not clear the untrained level {fmt(floor)}."
        )
    elif answer is None:
        verdict = (
            f"No tested {q.name} reached the criterion {fmt(crit)} with confidence: no arm's interval lies above it "
            f"(best: {best.label}, {_ci(best.interval)})."
        )
    else:
        verdict = f"The {word} {q.name} that reaches the criterion ({stat} >= {fmt(crit)}) is {fmt(answer.x)}: {_ci(answer.interval)}."
        if neighbour is not None:
            what = "falls short" if status[neighbour.label] == "fail" else "is uncertain"
            verdict += f" The next tested value, {fmt(neighbour.x)}, {what}: {_ci(neighbour.interval)}."
        elif answer is order[0]:
            verdict += f" It is the {'smallest' if direction == 'min' else 'largest'} value tested."
        if not monotone:
            verdict += f" Not monotone: a {q.name} beyond it fails."
    return ThresholdResult(
        direction, crit, floor, trained, status, answer, neighbour, best, confident, monotone, verdict
    )


# -- best, compare, effect ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BestResult:
    best: ArmStats
    tied: tuple[ArmStats, ...]  # CIs overlap the best's
    dominated: tuple[ArmStats, ...]  # CI entirely below the best's
    separated: bool
    verdict: str


def best_arm(arms: Sequence[ArmStats], q: Question) -> BestResult:
    """The arm with the highest mean score, its ties and the arms it dominates."""
    if not arms:
        raise ValueError("best_arm needs at least one scored arm")
    best = max(arms, key=lambda a: (a.interval.mean, a.n))
    tied = tuple(a for a in arms if a is not best and overlaps(a.interval, best.interval))
    dominated = tuple(a for a in arms if a is not best and a.interval.hi < best.interval.lo)
    verdict = f"Best {q.name}: {fmt(best.x)} ({q.statistic} {q.metric} {_ci(best.interval)})."
    if tied:
        verdict += (
            " Tied with "
            + ", ".join(f"{fmt(a.x)} ({_ci(a.interval)})" for a in tied)
            + ": the intervals overlap."
        )
    else:
        verdict += " Its interval is clear of every other arm's."
    return BestResult(best, tied, dominated, not tied, verdict)


@dataclass(frozen=True)
class CompareResult:
    a: ArmStats
    b: ArmStats
    diff: Interval  # mean(a) - mean(b)
    winner: ArmStats | None  # None: a tie
    verdict: str


def compare_arms(a: ArmStats, b: ArmStats, q: Question, *, seed: int = 0) -> CompareResult:
    """A versus B by the bootstrap CI of the difference of their mean scores."""
    diff = diff_ci(a.scores, b.scores, seed=seed)
    winner = a if diff.lo > 0 else b if diff.hi < 0 else None
    head = f"{fmt(a.x)} versus {fmt(b.x)}: difference in {q.statistic} {q.metric} {_ci(diff)}"
    if winner is None:
        verdict = f"{head}. A tie: the interval contains 0 ({fmt(a.x)}: {_ci(a.interval)}; {fmt(b.x)}: {_ci(b.interval)})."
    else:
        verdict = f"{head}. {fmt(winner.x)} is better."
    return CompareResult(a, b, diff, winner, verdict)


@dataclass(frozen=True)
class EffectResult:
    low: ArmStats
    high: ArmStats
    diff: Interval  # score(high x) - score(low x)
    direction: Literal["increases", "decreases", "none"]
    overlapping_neighbours: tuple[tuple[str, str], ...]  # adjacent arms whose CIs overlap
    verdict: str


def effect_of(arms: Sequence[ArmStats], q: Question, *, seed: int = 0) -> EffectResult:
    """The change in score from the lowest to the highest tested x (ordered arms)."""
    if len(arms) < 2:
        raise ValueError("an effect needs at least two scored arms")
    order = sorted(arms, key=lambda a: _sort_key(a.x))
    low, high = order[0], order[-1]
    diff = diff_ci(high.scores, low.scores, seed=seed)
    direction = "increases" if diff.lo > 0 else "decreases" if diff.hi < 0 else "none"
    pairs = tuple(
        (a.label, b.label) for a, b in zip(order, order[1:], strict=False) if overlaps(a.interval, b.interval)
    )
    head = f"From {q.name} {fmt(low.x)} to {fmt(high.x)} the {q.statistic} {q.metric} changes by {_ci(diff)}"
    tail = {
        "increases": f": raising {q.name} helps.",
        "decreases": f": raising {q.name} hurts.",
        "none": ": no clear effect (the interval contains 0).",
    }[direction]
    return EffectResult(low, high, diff, direction, pairs, head + tail)


def dominated_arms(arms: Sequence[ArmStats], *, keep_fraction: float = 0.5) -> list[ArmStats]:
    """Arms to stop early (successive halving on partial curves): CI entirely below the leader's, lowest
    mean first, never leaving fewer than ceil(keep_fraction * n) arms."""
    if len(arms) < 2:
        return []
    best = max(arms, key=lambda a: a.interval.mean)
    cands = sorted((a for a in arms if a.interval.hi < best.interval.lo), key=lambda a: a.interval.mean)
    max_drop = len(arms) - math.ceil(keep_fraction * len(arms))
    return cands[:max_drop]


# -- whole-question evidence ----------------------------------------------------------------------------
@dataclass
class LevelEvidence:
    level: Any  # secondary value, or None
    arms: list[ArmStats]
    threshold: ThresholdResult | None = None
    best: BestResult | None = None
    compare: CompareResult | None = None
    effect: EffectResult | None = None

    @property
    def verdict(self) -> str:
        for r in (self.threshold, self.compare, self.effect, self.best):
            if r is not None:
                return r.verdict
        return "No scored runs at this level."


@dataclass
class Evidence:
    question: Question
    levels: list[LevelEvidence]
    secondary_verdict: str | None = None
    secondary_effect: Interval | None = None  # pooled score at the highest minus the lowest secondary level
    answer: str = ""
    excluded_runs: list[int] = field(default_factory=list)


def analyse(q: Question, obs: Sequence[RunObs], *, seed: int = 0) -> Evidence:
    """Everything the leader decides on and the report prints, from the runs alone."""
    arms = summarise_arms(obs, q.statistic, seed=seed)
    by_level: dict[Any, list[ArmStats]] = defaultdict(list)
    for a in arms:
        by_level[a.level].append(a)
    levels = []
    for lvl in sorted(by_level, key=_sort_key):
        le = LevelEvidence(level=lvl, arms=by_level[lvl])
        la = le.arms
        if q.shape in ("minimum", "maximum"):
            le.threshold = threshold(la, q)
        elif q.shape == "compare" and len(la) == 2:
            le.compare = compare_arms(la[0], la[1], q, seed=seed)
        elif q.shape == "effect" and len(la) >= 2:
            le.effect = effect_of(la, q, seed=seed)
            le.best = best_arm(la, q)
        else:
            le.best = best_arm(la, q)
        levels.append(le)
    ev = Evidence(question=q, levels=levels, excluded_runs=sorted(r for a in arms for r in a.excluded))
    ev.excluded_runs += sorted({o.run_id for o in obs} - {r for a in arms for r in (*a.run_ids, *a.excluded)})
    if q.secondary_name is not None and len(levels) >= 2:
        ev.secondary_verdict, ev.secondary_effect = _secondary(q, levels, seed)
    parts = [
        (f"At {q.secondary_name} {fmt(le.level)}: " if le.level is not None else "") + le.verdict
        for le in levels
    ]
    if ev.secondary_verdict:
        parts.append(ev.secondary_verdict)
    ev.answer = " ".join(parts) if parts else "No run produced a score."
    return ev


def _secondary(q: Question, levels: list[LevelEvidence], seed: int) -> tuple[str, Interval | None]:
    """Does the secondary variable change the answer, and what is its own (pooled) effect?"""
    lo, hi = levels[0], levels[-1]
    pooled_lo = [s for a in lo.arms for s in a.scores]
    pooled_hi = [s for a in hi.arms for s in a.scores]
    eff = diff_ci(pooled_hi, pooled_lo, seed=seed) if pooled_lo and pooled_hi else None
    name = q.secondary_name
    if q.shape in ("minimum", "maximum"):
        answers = [
            (le.level, le.threshold.answer.x if le.threshold.answer else None, le.threshold.confident)
            for le in levels
        ]
        shown = "; ".join(
            f"{fmt(a) if a is not None else 'none'} at {name} {fmt(lv)}" for lv, a, _c in answers
        )
        distinct = {a for _lv, a, _c in answers}
        if distinct == {None}:
            text = f"Whether {name} changes the answer cannot be told: no level has an answer ({shown})."
        elif len(distinct) == 1:
            text = f"{name.capitalize()} does not change the answer at the tested resolution ({shown})."
        elif all(c for _lv, _a, c in answers):
            text = f"{name.capitalize()} changes the answer: {shown}."
        else:
            text = f"Whether {name} changes the answer is not settled: {shown}, not all confident."
    else:
        bests = {
            le.level: (
                le.best.best.x
                if le.best
                else le.compare.winner.x
                if le.compare and le.compare.winner
                else None
            )
            for le in levels
        }
        shown = "; ".join(
            f"{fmt(b) if b is not None else 'tie'} at {name} {fmt(lv)}" for lv, b in bests.items()
        )
        same = len(set(bests.values())) == 1
        text = (
            f"{name.capitalize()} {'does not change' if same else 'changes'} which {q.name} wins ({shown})."
        )
    if eff is not None:
        text += f" Pooled over {q.name}, {name} {fmt(hi.level)} versus {fmt(lo.level)} changes the score by {_ci(eff)}."
    return text, eff
