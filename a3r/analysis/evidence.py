"""From per-run observations to per-arm statistics and a verdict for each question shape.

An *arm* is one configuration: a value `x` of the studied variable at one `level` of the secondary
variable (None without one). Its runs are seeds; only succeeded runs with a finite curve score. Every
run is scored on the same held-out set at step 0 and later, so each seed carries its own untrained level
and its *gain* (score - step-0 score) is paired: the evaluation set's own noise cancels.

Rules shared by every shape (see `shared/specs/research-validity.md`):
- intervals are Student-t (one arm) or Welch (two arms), with a per-seed sd never below one held-out
  item's worth (`Question.eval_items`), at the level `1 - alpha / looks` so that the planned looks
  (stages) together spend at most `alpha`; comparisons against several arms split it further (Bonferroni);
- an arm gets a label (pass/fail, best, winner) only with at least `min_seeds` seeds;
- an arm *trains* when the lower bound of its gain interval is above 0. An arm that does not train is
  never "best", "smallest", the winner or the effect; when no arm trains the verdict says so
  (`Evidence.nothing_trains`) and names no answer.

Shapes:
- threshold (minimum/maximum): the criterion is fixed before the grid. Relative: the arm's gain keeps
  `criterion_value` f of the reference arm's gain (the generous end of the range; f = 0: it trains at
  all), with the reference gain taken from the calibration stage's seeds when there are any; the test is
  the Welch interval of gain_arm - f * gain_ref. Fail: the interval of gain_arm - max(f, min_effect) *
  gain_ref is below 0, i.e. whatever it gains is shown smaller than the smallest effect worth reporting
  (this comes first: an arm shown above 0 but below that margin has not shown enough to count). Pass: the
  arm trains, that interval is above 0 and it does not fail. Otherwise uncertain. Absolute: the arm's score
  interval against the researcher's number. The answer is the cheapest passing value; it is conclusive
  when the next cheaper tested value fails (or none was tested) and no costlier value fails.
- best: among arms that train, the highest mean; conclusive when its Welch difference to every other
  labelled arm is above 0 at the look's level. Naming arm i needs i to beat *every* other arm, so it
  needs i to beat the true best j, whose one-sided error is alpha / (2 looks); the worst case is two
  tied leaders (either may be named: 2 x alpha / (2 looks)); with three or more tied, beating all of them
  at once is rarer still. So the conjunction needs no Bonferroni split over the k - 1 comparisons (an
  intersection-union test); `tests/a3r_leader/test_campaign_sim.py` checks the two-leader worst case.
- compare: Welch difference of the two arms; a winner must train.
- effect: Welch difference of the highest and the lowest x; stated only when some arm trains.

Confirmation: `analyse(..., confirm_stage=k)` answers from stage k's runs alone (fresh seeds, one look at
the full alpha), keeping the pooled evidence of the stages before it as `Evidence.exploration`. With
`Question.pair_seeds`, a best/compare/effect confirmation compares arms paired on their common seeds (runs
of the same seed share task order and sampling streams) when the exploration's runs say the paired
interval is the narrower (`pairing_check`; the choice never looks at the confirmation's runs); with
`provisional=True` (a campaign whose answer needs a confirmation that has not run) nothing is conclusive.

Verdict sentences are built here from the numbers, so every number a report prints traces to a run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from scipy.stats import norm

from a3r.analysis.curves import CurveScore, score_curve
from a3r.analysis.stats import (
    Interval,
    binomial_sd,
    look_level,
    paired_interval,
    resolution_sd,
    t_interval,
    t_quantile,
    welch_interval,
)

__all__ = [
    "ArmStats",
    "BestResult",
    "CompareResult",
    "EffectResult",
    "Evidence",
    "LevelEvidence",
    "PairingCheck",
    "Question",
    "RunObs",
    "ThresholdResult",
    "analyse",
    "best_arm",
    "cheaper_neighbour",
    "compare_arms",
    "dominated_arms",
    "effect_of",
    "fmt",
    "pairing_check",
    "shows_training",
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


# The smallest effect worth reporting, as a fraction of the reference configuration's gain: an arm shown
# to gain less does not train, and the calibration sizes seeds to detect a difference this large.
MIN_EFFECT = 0.5


@dataclass(frozen=True)
class Question:
    """What the analysis needs to know about the goal (kept free of leader types on purpose)."""

    shape: Literal["minimum", "maximum", "best", "effect", "compare"]
    name: str  # studied variable, for sentences
    statistic: Literal["final", "auc"] = "final"
    metric: str = "eval_accuracy"
    criterion_kind: Literal["relative", "absolute"] = "relative"
    criterion_value: float = 0.0
    secondary_name: str | None = None
    alpha: float = 0.05  # familywise error over all planned looks
    looks: int = 1  # planned analysis looks (stages); each decides at alpha / looks
    min_seeds: int = 3  # no label below this many seeds per arm
    eval_items: int | None = None  # held-out items per evaluation: the noise floor of a score
    min_effect: float = MIN_EFFECT  # fraction of the reference gain below which an arm "does not train"
    pair_seeds: bool = False  # a confirmation may compare arms paired on seeds (`pairing_check` decides)
    paired: bool = False  # comparisons of arms use the paired interval on their common seeds
    values: tuple[Any, ...] = ()  # the values the question names (its first grid), for sentences; () unknown

    @property
    def level(self) -> float:
        """Confidence level of one decision at one look."""
        return look_level(self.alpha, self.looks)

    def floor_sd(self, p: float) -> float:
        """Smallest sd a per-seed score can claim: one held-out item's worth (0 when the set is unknown).
        `p` is kept for callers that scale the floor with the score level."""
        return resolution_sd(self.eval_items) if self.eval_items else 0.0


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
    calibration: bool = False  # a run of the calibration (pilot) stage

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
    initial: float  # mean untrained (step-0) level of those runs
    gains: tuple[float, ...] = ()  # per-seed score - the same run's step-0 score
    gain_interval: Interval | None = None
    calibration_gains: tuple[float, ...] = ()  # gains of this arm's calibration-stage runs
    trained: bool = False  # enough seeds and the gain interval's lower bound above 0
    excluded: tuple[int, ...] = ()  # runs of this arm that did not contribute (failed, cancelled, no data)
    diverged: tuple[int, ...] = ()  # contributing runs whose curve had NaN steps
    seeds: tuple[int, ...] = ()  # the seed of each score, in the same order

    def by_seed(self) -> dict[int, float]:
        return dict(zip(self.seeds, self.scores, strict=True))

    @property
    def n(self) -> int:
        return len(self.scores)


def summarise_arms(obs: Sequence[RunObs], q: Question) -> list[ArmStats]:
    """Group runs by (level, x) and give each arm t intervals of its scores and paired gains. Arms
    without a scored run are left out."""
    groups: dict[tuple[Any, Any], list[RunObs]] = defaultdict(list)
    for o in obs:
        groups[(o.level, o.x)].append(o)
    out = []
    for (lvl, x), runs in groups.items():
        scored = [(o, s) for o in runs if o.state == "succeeded" and (s := o.score()) is not None]
        if not scored:
            continue
        scores = tuple(s.get(q.statistic) for _o, s in scored)
        gains = tuple(s.get(q.statistic) - s.initial for _o, s in scored)
        mean = sum(scores) / len(scores)
        interval = t_interval(scores, level=q.level, floor_sd=q.floor_sd(mean))
        gain_iv = t_interval(gains, level=q.level, floor_sd=q.floor_sd(mean))
        enough = len(scores) >= q.min_seeds
        out.append(
            ArmStats(
                label=runs[0].label,
                x=x,
                level=lvl,
                interval=interval,
                scores=scores,
                run_ids=tuple(o.run_id for o, _s in scored),
                initial=sum(s.initial for _o, s in scored) / len(scored),
                gains=gains,
                gain_interval=gain_iv,
                calibration_gains=tuple(g for (o, _s), g in zip(scored, gains, strict=True) if o.calibration),
                trained=enough and shows_training(gain_iv),
                excluded=tuple(o.run_id for o in runs if all(o is not p for p, _s in scored)),
                diverged=tuple(o.run_id for o, s in scored if s.diverged),
                seeds=tuple(o.seed for o, _s in scored),
            )
        )
    return sorted(out, key=lambda a: (_sort_key(a.level), _sort_key(a.x)))


def shows_training(gain: Interval) -> bool:
    """The "must train" rule: the gain's interval over the untrained level lies above 0. Nothing that fails
    it is named best, smallest or a winner, and a calibration that fails it stops the campaign."""
    return gain.defined and gain.lo > 0


def _sort_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v))


def untrained_level(obs: Sequence[RunObs], q: Question) -> Interval | None:
    """The step-0 score of every scored run, as a mean with its interval: binomial on the held-out set
    when its size is known (every run evaluates the same items, so seeds do not average its noise away),
    else Student-t over the runs."""
    init = [s.initial for o in obs if o.state == "succeeded" and (s := o.score()) is not None]
    if not init:
        return None
    p = sum(init) / len(init)
    if q.eval_items:
        half = float(norm.ppf(1 - (1 - q.level) / 2)) * binomial_sd(p, q.eval_items)
        return Interval(p, max(0.0, p - half), min(1.0, p + half), len(init), q.level)
    return t_interval(init, level=q.level)


def _labelled(arms: Sequence[ArmStats], q: Question) -> list[ArmStats]:
    return [a for a in arms if a.n >= q.min_seeds]


def _gain(a: ArmStats) -> str:
    return _ci(a.gain_interval) if a.gain_interval is not None else "n/a"


def _only_one_value(a: ArmStats, q: Question) -> str:
    """The verdict when a single value was tested: it may train, but there is nothing to compare it with."""
    return (
        f"Cannot tell: only {q.name} {fmt(a.x)} was tested ({q.statistic} {q.metric} {_ci(a.interval)}, gain over "
        f"the untrained level {_gain(a)}); answering the question needs at least two tested values."
    )


def _nothing_trains(arms: Sequence[ArmStats], q: Question) -> str:
    """The verdict when no arm's gain clears 0; says whether it is settled or just under-seeded."""
    best = max(arms, key=lambda a: a.gain_interval.mean if a.gain_interval else -math.inf)
    few = [a.label for a in arms if a.n < q.min_seeds]
    tested = {a.x for a in arms}
    untested = [v for v in q.values if v not in tested]
    # name what ran: "no tested X" would read as "none of the question's values" when some never ran
    if len(arms) == 1:
        s = (
            f"Cannot tell: {best.label}, the only {q.name} tested, is not shown to train: its gain in {q.statistic} "
            f"{q.metric} over the untrained level is {_gain(best)}, an interval that does not lie above 0."
        )
    else:
        which = f"none of the {q.name} values tested ({', '.join(a.label for a in arms)})" if untested else f"no tested {q.name}"
        s = (
            f"Cannot tell: {which} is shown to train. The largest gain in {q.statistic} {q.metric} over "
            f"the untrained level is {best.label}'s, {_gain(best)}, and no arm's gain interval lies above 0."
        )
    if untested:
        s += f" Not tested: {q.name} {', '.join(fmt(v) for v in untested)}."
    if few:
        s += f" Arms with fewer than {q.min_seeds} seeds carry no label: {', '.join(few)}."
    return s


# -- threshold ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ThresholdResult:
    direction: Literal["min", "max"]
    criterion: Interval  # on the gain scale (relative) or the score scale (absolute)
    floor: float  # the untrained level (mean step-0 score)
    trained: bool  # some arm trains
    status: dict[str, str]  # arm label -> pass | fail | uncertain
    tests: dict[str, Interval]  # arm label -> interval the status was read from
    answer: ArmStats | None
    neighbour: ArmStats | None  # adjacent tested arm beyond the answer (should fail)
    best: ArmStats  # highest mean score at this level
    reference: ArmStats  # the arm the relative criterion scales
    confident: bool
    monotone: bool
    verdict: str
    margin: float = 0.0  # fail margin: the fraction of the reference gain an arm is shown below to fail
    fail_gain: float | None = None  # that margin on the gain scale (relative criterion only; else None)

    @property
    def conclusive(self) -> bool:
        return self.answer is not None and self.confident and self.monotone


def _versus_reference(a: ArmStats, reference: ArmStats, ref_gains: Sequence[float], f: float, q: Question) -> Interval:
    """Welch interval of the arm's gain minus f times the reference's gain."""
    return welch_interval(
        a.gains,
        ref_gains,
        level=q.level,
        scale_b=f,
        floor_sd_a=q.floor_sd(a.interval.mean),
        floor_sd_b=q.floor_sd(reference.interval.mean),
    )


def threshold(arms: Sequence[ArmStats], q: Question) -> ThresholdResult:
    """Cheapest x (smallest for minimum, largest for maximum) that passes the pre-set criterion."""
    if not arms:
        raise ValueError("threshold needs at least one scored arm")
    direction: Literal["min", "max"] = "min" if q.shape == "minimum" else "max"
    order = sorted(arms, key=lambda a: _sort_key(a.x), reverse=direction == "max")  # from the cheap end
    floor = sum(a.initial * a.n for a in arms) / sum(a.n for a in arms)
    best = max(arms, key=lambda a: a.interval.mean)
    reference = order[-1]  # the generous end of the range, fixed by the question, not by the data
    ref_gains = reference.calibration_gains if len(reference.calibration_gains) >= 2 else reference.gains
    f = q.criterion_value
    tests: dict[str, Interval] = {}
    status: dict[str, str] = {}
    margin = max(f, q.min_effect)  # "does not train": shown below the smallest effect worth reporting
    fail_gain = None
    if q.criterion_kind == "absolute":
        crit = Interval(f, f, f, 0, q.level)
        for a in order:
            tests[a.label] = a.interval
    else:
        ref_iv = t_interval(ref_gains, level=q.level, floor_sd=q.floor_sd(reference.interval.mean))
        crit = ref_iv.scaled(f)
        fail_gain = margin * ref_iv.mean
        for a in order:
            tests[a.label] = _versus_reference(a, reference, ref_gains, f, q)
    for a in order:
        iv = tests[a.label]
        if a.n < q.min_seeds or not iv.defined:
            status[a.label] = "uncertain"
        elif q.criterion_kind == "absolute":
            status[a.label] = "pass" if a.trained and iv.lo >= f else "fail" if iv.hi < f else "uncertain"
        else:
            short = iv if margin == f else _versus_reference(a, reference, ref_gains, margin, q)
            if short.hi < 0:
                status[a.label] = "fail"  # shown below the margin, even if above 0: too little to count
            else:
                status[a.label] = "pass" if a.trained and iv.lo > 0 else "uncertain"
    trained = any(a.trained for a in arms)
    passing = [i for i, a in enumerate(order) if status[a.label] == "pass"]
    answer = order[passing[0]] if passing else None
    neighbour = order[passing[0] - 1] if passing and passing[0] > 0 else None
    # one tested value answers nothing about a range: "the smallest tested" would be that value by default
    confident = (
        answer is not None and len(order) >= 2 and (neighbour is None or status[neighbour.label] == "fail")
    )
    monotone = answer is None or all(status[a.label] != "fail" for a in order[passing[0] :])
    word = "smallest" if direction == "min" else "largest"
    if q.criterion_kind == "absolute":
        what = f"{q.statistic} {q.metric} >= {fmt(f)}"
    elif f > 0:
        what = f"a gain of at least {f:.0%} of {reference.label}'s, i.e. {_ci(crit)}"
    else:
        what = f"a gain above 0; an arm fails when its gain is shown below {margin:.0%} of {reference.label}'s"
    if not trained:
        verdict = _nothing_trains(arms, q)
    elif len(order) < 2:
        verdict = _only_one_value(order[0], q)
    elif answer is None:
        verdict = (
            f"No tested {q.name} is shown to reach the criterion ({what}); the closest is "
            f"{best.label} with gain {_gain(best)}."
        )
    else:
        verdict = (
            f"The {word} tested {q.name} that still trains is {fmt(answer.x)}: gain over the untrained level "
            f"{fmt(floor)} is {_gain(answer)}, meeting the criterion ({what})"
            + (f"; difference to the criterion {_ci(tests[answer.label])}." if f > 0 else ".")
        )
        if neighbour is not None:
            how = "falls short" if status[neighbour.label] == "fail" else "is uncertain"
            verdict += f" The next tested value, {fmt(neighbour.x)}, {how}: {_ci(tests[neighbour.label])}."
        else:
            side = "below" if direction == "min" else "above"
            verdict += f" It is the {word} value tested, so the threshold lies at or {side} it."
        if not monotone:
            verdict += f" Not monotone: a {q.name} beyond it fails."
    return ThresholdResult(
        direction,
        crit,
        floor,
        trained,
        status,
        tests,
        answer,
        neighbour,
        best,
        reference,
        confident,
        monotone,
        verdict,
        margin,
        fail_gain,
    )


# -- best, compare, effect ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BestResult:
    best: ArmStats | None  # None: no arm trains
    tied: tuple[ArmStats, ...]  # differences to the best contain 0 (or too few seeds)
    dominated: tuple[ArmStats, ...]  # difference to the best above 0
    diffs: dict[str, Interval]  # arm label -> best - arm (Bonferroni-adjusted level)
    separated: bool
    verdict: str

    @property
    def conclusive(self) -> bool:
        return self.best is not None and self.separated


def _common_seeds(a: ArmStats, b: ArmStats) -> list[int]:
    return sorted(set(a.seeds) & set(b.seeds))


def _diff(a: ArmStats, b: ArmStats, q: Question, level: float) -> Interval:
    """mean(a) - mean(b): paired on their common seeds when the question is analysed paired (and they
    share at least two), else Welch's interval over all their seeds."""
    common = _common_seeds(a, b) if q.paired else []
    if len(common) >= 2:
        sa, sb = a.by_seed(), b.by_seed()
        return paired_interval(
            [sa[s] for s in common],
            [sb[s] for s in common],
            level=level,
            floor_sd=max(q.floor_sd(a.interval.mean), q.floor_sd(b.interval.mean)),
        )
    return welch_interval(
        a.scores,
        b.scores,
        level=level,
        floor_sd_a=q.floor_sd(a.interval.mean),
        floor_sd_b=q.floor_sd(b.interval.mean),
    )


def best_arm(arms: Sequence[ArmStats], q: Question) -> BestResult:
    """The arm that trains best, compared with every other arm (it must beat each of them)."""
    if not arms:
        raise ValueError("best_arm needs at least one scored arm")
    trained = [a for a in _labelled(arms, q) if a.trained]
    if not trained:
        return BestResult(None, (), (), {}, False, _nothing_trains(arms, q))
    best = max(trained, key=lambda a: (a.interval.mean, a.n))
    others = [a for a in arms if a is not best]
    if not others:
        return BestResult(best, (), (), {}, False, _only_one_value(best, q))
    level = q.level  # no split over the k - 1 comparisons: see the module docstring
    diffs = {a.label: _diff(best, a, q, level) for a in others}
    dominated = tuple(
        a for a in others if a.n >= q.min_seeds and diffs[a.label].defined and diffs[a.label].lo > 0
    )
    tied = tuple(a for a in others if a not in dominated)
    stat = f"{q.statistic} {q.metric}"
    verdict = f"Best {q.name}: {fmt(best.x)} ({stat} {_ci(best.interval)}, gain {_gain(best)})."
    if tied:
        verdict = (
            f"Cannot separate the best {q.name}: {fmt(best.x)} leads ({stat} {_ci(best.interval)}) but is not "
            "shown better than "
            + ", ".join(f"{fmt(a.x)} (difference {_ci(diffs[a.label])})" for a in tied)
            + "."
        )
    elif others:
        verdict += (
            " It beats every other tested value: "
            + ", ".join(f"{fmt(a.x)} by {_ci(diffs[a.label])}" for a in others)
            + "."
        )
    return BestResult(best, tied, dominated, diffs, not tied, verdict)


@dataclass(frozen=True)
class CompareResult:
    a: ArmStats
    b: ArmStats
    diff: Interval  # mean(a) - mean(b)
    winner: ArmStats | None  # None: a tie, or nothing trains
    trained: bool  # at least one of the two trains
    verdict: str

    @property
    def conclusive(self) -> bool:
        return self.winner is not None


def compare_arms(a: ArmStats, b: ArmStats, q: Question) -> CompareResult:
    """A versus B by the Welch interval of the difference of their mean scores."""
    diff = _diff(a, b, q, q.level)
    enough = a.n >= q.min_seeds and b.n >= q.min_seeds
    trained = a.trained or b.trained
    winner = None
    if enough and diff.defined:
        winner = a if diff.lo > 0 and a.trained else b if diff.hi < 0 and b.trained else None
    head = f"{fmt(a.x)} versus {fmt(b.x)}: difference in {q.statistic} {q.metric} {_ci(diff)}"
    if not trained:
        verdict = _nothing_trains([a, b], q)
    elif not enough:
        verdict = f"{head}. Too few seeds for a label (need {q.min_seeds} per arm)."
    elif winner is None:
        verdict = (
            f"{head}. No difference shown: the interval contains 0 ({fmt(a.x)}: {_ci(a.interval)}; "
            f"{fmt(b.x)}: {_ci(b.interval)})."
        )
    else:
        verdict = f"{head}. {fmt(winner.x)} is better (gain {_gain(winner)})."
    return CompareResult(a, b, diff, winner, trained and enough, verdict)


@dataclass(frozen=True)
class EffectResult:
    low: ArmStats
    high: ArmStats
    diff: Interval  # score(high x) - score(low x)
    direction: Literal["increases", "decreases", "none", "unknown"]
    overlapping_neighbours: tuple[tuple[str, str], ...]  # adjacent arms whose intervals overlap
    verdict: str

    @property
    def conclusive(self) -> bool:
        return self.direction != "unknown"


def effect_of(arms: Sequence[ArmStats], q: Question) -> EffectResult:
    """The change in score from the lowest to the highest tested x (ordered arms)."""
    if len(arms) < 2:
        raise ValueError("an effect needs at least two scored arms")
    order = sorted(arms, key=lambda a: _sort_key(a.x))
    low, high = order[0], order[-1]
    diff = _diff(high, low, q, q.level)
    pairs = tuple(
        (a.label, b.label) for a, b in zip(order, order[1:], strict=False) if a.interval.overlaps(b.interval)
    )
    if not any(a.trained for a in arms):
        return EffectResult(low, high, diff, "unknown", pairs, _nothing_trains(arms, q))
    if min(low.n, high.n) < q.min_seeds or not diff.defined:
        direction: Literal["increases", "decreases", "none", "unknown"] = "unknown"
    else:
        direction = "increases" if diff.lo > 0 else "decreases" if diff.hi < 0 else "none"
    head = f"From {q.name} {fmt(low.x)} to {fmt(high.x)} the {q.statistic} {q.metric} changes by {_ci(diff)}"
    tail = {
        "increases": f": raising {q.name} helps.",
        "decreases": f": raising {q.name} hurts.",
        "none": ": no effect shown (the interval contains 0).",
        "unknown": f": too few seeds for a label (need {q.min_seeds} per arm).",
    }[direction]
    return EffectResult(low, high, diff, direction, pairs, head + tail)


def dominated_arms(arms: Sequence[ArmStats], *, keep_fraction: float = 0.5) -> list[ArmStats]:
    """Arms to stop early (successive halving on partial curves): interval entirely below the leader's,
    lowest mean first, never leaving fewer than ceil(keep_fraction * n) arms. It only stops arms and
    never names a winner; its look is counted in `Question.looks` by the planner."""
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

    @property
    def trained(self) -> bool:
        return any(a.trained for a in self.arms)

    @property
    def conclusive(self) -> bool:
        for r in (self.threshold, self.compare, self.effect, self.best):
            if r is not None:
                return r.conclusive
        return False


@dataclass
class Evidence:
    question: Question
    levels: list[LevelEvidence]
    untrained: Interval | None = None  # the step-0 level of every scored run
    secondary_verdict: str | None = None
    secondary_effect: Interval | None = None  # pooled score at the highest minus the lowest secondary level
    answer: str = ""
    excluded_runs: list[int] = field(default_factory=list)
    exploration: Evidence | None = None  # the pooled stages before a confirmation (it answers alone)
    confirm_stage: int | None = None  # the stage whose fresh seeds alone answer
    provisional: bool = False  # the answer awaits a confirmation: nothing is conclusive yet
    pairing: PairingCheck | None = None  # how the confirmation chose paired or unpaired intervals

    @property
    def nothing_trains(self) -> bool:
        """No arm at any level shows a gain (the answer must then be "cannot tell", never a winner)."""
        return bool(self.levels) and not any(le.trained for le in self.levels)

    @property
    def conclusive(self) -> bool:
        return not self.provisional and bool(self.levels) and all(le.conclusive for le in self.levels)


@dataclass(frozen=True)
class PairingCheck:
    """Does pairing arms on seeds narrow the confirmation's intervals? Measured on the exploration's runs
    (every pair of arms at a level, on the seeds both ran), never on the runs being tested."""

    sd_paired: float  # pooled sd of the per-seed differences
    sd_unpaired: float  # sd of the difference of two independent seeds, sqrt(var a + var b), same seeds
    df: int  # degrees of freedom of both (pairs x (common seeds - 1))
    n: int  # seeds per arm of the confirmation the check is for
    use: bool  # the paired interval is expected to be the narrower one at n seeds

    def describe(self) -> str:
        how = "paired on seeds" if self.use else "unpaired (Welch)"
        return (
            f"analysed {how}: on the exploration's runs the sd of per-seed differences was {fmt(self.sd_paired)} "
            f"against {fmt(self.sd_unpaired)} unpaired ({self.df} df)"
        )


def pairing_check(explored: Evidence, n: int, level: float) -> PairingCheck | None:
    """Whether a confirmation of `n` seeds per arm is analysed paired, from the exploration alone: paired
    when its expected half-width t(n - 1) sd_paired is below Welch's t(2n - 2) sd_unpaired (pairing costs
    half the df, so a slightly smaller sd is not enough at few seeds). None when no two arms share two
    seeds (nothing measured: unpaired).

    Why this keeps alpha: which interval the confirmation uses is a function of earlier stages' runs only,
    which are independent of the confirmation's fresh seeds; given that choice, each interval is a valid
    level-`level` interval for the difference (the paired t needs no assumption on the correlation), so the
    error is alpha whatever was chosen. Choosing on the confirmation's own runs (the narrower of the two)
    would take the smaller of two p-values and spend more than alpha."""
    ss_d = ss_u = 0.0
    df = 0
    for le in explored.levels:
        for i, a in enumerate(le.arms):
            for b in le.arms[i + 1 :]:
                common = _common_seeds(a, b)
                if len(common) < 2:
                    continue
                sa, sb = a.by_seed(), b.by_seed()
                xa, xb = [sa[s] for s in common], [sb[s] for s in common]
                d = [u - v for u, v in zip(xa, xb, strict=True)]
                ss_d += _ss(d)
                ss_u += _ss(xa) + _ss(xb)
                df += len(common) - 1
    if df == 0 or n < 2:
        return None
    sd_p, sd_u = math.sqrt(ss_d / df), math.sqrt(ss_u / df)
    p = 1 - (1 - level) / 2
    use = float(t_quantile(p, n - 1)) * sd_p < float(t_quantile(p, 2 * n - 2)) * sd_u
    return PairingCheck(sd_p, sd_u, df, n, use)


def _ss(x: Sequence[float]) -> float:
    m = sum(x) / len(x)
    return sum((v - m) ** 2 for v in x)


def analyse(
    q: Question, obs: Sequence[RunObs], *, confirm_stage: int | None = None, provisional: bool = False
) -> Evidence:
    """Everything the leader decides on and the report prints, from the runs alone. With `confirm_stage`,
    the answer is that stage's runs alone at one look (fresh seeds: no winner's curse, no exploration
    look spends error); the stages before it are kept as `exploration`."""
    if confirm_stage is not None:
        explored = _analyse(q, [o for o in obs if o.stage < confirm_stage])
        fresh = [o for o in obs if o.stage == confirm_stage]
        confirm_q = replace(q, looks=1)
        pairing = None
        if q.pair_seeds and q.shape in ("best", "compare", "effect"):
            per_arm: dict[tuple[Any, Any], int] = defaultdict(int)
            for o in fresh:
                per_arm[(o.level, o.x)] += 1
            pairing = pairing_check(explored, min(per_arm.values(), default=0), confirm_q.level)
            confirm_q = replace(confirm_q, paired=pairing is not None and pairing.use)
        ev = _analyse(confirm_q, fresh)
        ev.exploration, ev.confirm_stage, ev.pairing = explored, confirm_stage, pairing
        _only_what_was_checked(ev, explored)
        how = f"; {pairing.describe()}" if pairing is not None else ""
        ev.answer = f"Confirmed on fresh seeds (stage {confirm_stage}, analysed alone{how}): {ev.answer}"
        return ev
    ev = _analyse(q, obs)
    if provisional:
        ev.provisional = True
        ev.answer = f"Not confirmed: the answer needs a confirmation on fresh seeds, which did not run. Exploration says: {ev.answer}"
    return ev


def cheaper_neighbour(arms: Sequence[ArmStats], x: Any, direction: Literal["min", "max"]) -> ArmStats | None:
    """The arm with the next cheaper tested value than `x` (the next smaller for a minimum, the next larger
    for a maximum), or None when `x` is the cheapest."""
    if direction == "min":
        cheaper = [a for a in arms if _sort_key(a.x) < _sort_key(x)]
        return max(cheaper, key=lambda a: _sort_key(a.x), default=None)
    cheaper = [a for a in arms if _sort_key(a.x) > _sort_key(x)]
    return min(cheaper, key=lambda a: _sort_key(a.x), default=None)


def _only_what_was_checked(ev: Evidence, explored: Evidence) -> None:
    """A threshold confirmation re-runs the exploration's answer, its neighbour and the reference (and,
    when the neighbour was not shown to fail, the value beyond it). Its answer is confirmed when it is the
    exploration's, or when the value just cheaper than it *among every value the campaign tested* was re-run
    in the confirmation and fails there (or there is none): values tested only by the exploration may lie
    between a confirmation's answer and its neighbour, and nothing fresh says how they fare, so any other
    answer is "not confirmed". Which arms the confirmation runs is fixed before its runs, from the
    exploration alone, so this choice spends no error of the confirmation's."""
    before = {le.level: le.threshold for le in explored.levels}
    tested = {le.level: le.arms for le in explored.levels}
    for le in ev.levels:
        th, old = le.threshold, before.get(le.level)
        if th is None or th.answer is None:
            continue
        proposed = old.answer.x if old is not None and old.answer is not None else None
        beyond = cheaper_neighbour(tested.get(le.level, []), th.answer.x, th.direction)
        rerun_fails = beyond is None or (
            th.neighbour is not None and th.neighbour.x == beyond.x and th.status.get(th.neighbour.label) == "fail"
        )
        if th.answer.x != proposed and not rerun_fails:
            le.threshold = replace(
                th,
                confident=False,
                verdict=f"Not confirmed: the exploration's answer {fmt(proposed)} was re-run on fresh seeds, and "
                f"there {th.verdict[0].lower()}{th.verdict[1:]}",
            )
    parts = [
        (f"At {ev.question.secondary_name} {fmt(le.level)}: " if le.level is not None else "") + le.verdict
        for le in ev.levels
    ]
    if ev.secondary_verdict:
        parts.append(ev.secondary_verdict)
    ev.answer = " ".join(parts) if parts else ev.answer


def _analyse(q: Question, obs: Sequence[RunObs]) -> Evidence:
    arms = summarise_arms(obs, q)
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
            le.compare = compare_arms(la[0], la[1], q)
        elif q.shape == "effect" and len(la) >= 2:
            le.effect = effect_of(la, q)
            le.best = best_arm(la, q)
        else:
            le.best = best_arm(la, q)
        levels.append(le)
    ev = Evidence(
        question=q,
        levels=levels,
        untrained=untrained_level(obs, q),
        excluded_runs=sorted(r for a in arms for r in a.excluded),
    )
    ev.excluded_runs += sorted({o.run_id for o in obs} - {r for a in arms for r in (*a.run_ids, *a.excluded)})
    if q.secondary_name is not None and len(levels) >= 2:
        ev.secondary_verdict, ev.secondary_effect = _secondary(q, levels)
    parts = [
        (f"At {q.secondary_name} {fmt(le.level)}: " if le.level is not None else "") + le.verdict
        for le in levels
    ]
    if ev.secondary_verdict:
        parts.append(ev.secondary_verdict)
    ev.answer = " ".join(parts) if parts else "No run produced a score."
    return ev


def _level_answer(le: LevelEvidence) -> Any:
    """The level's answer value, or None when it has none."""
    if le.threshold is not None:
        return le.threshold.answer.x if le.threshold.conclusive else None
    if le.compare is not None:
        return le.compare.winner.x if le.compare.winner else None
    if le.best is not None and le.best.conclusive:
        return le.best.best.x
    return None


def _secondary(q: Question, levels: list[LevelEvidence]) -> tuple[str, Interval | None]:
    """Does the secondary variable change the answer, and what is its own (pooled) effect?"""
    lo, hi = levels[0], levels[-1]
    pooled_lo = [s for a in lo.arms for s in a.scores]
    pooled_hi = [s for a in hi.arms for s in a.scores]
    eff = welch_interval(pooled_hi, pooled_lo, level=q.level) if pooled_lo and pooled_hi else None
    name = q.secondary_name
    answers = [(le.level, _level_answer(le)) for le in levels]
    shown = "; ".join(f"{fmt(a) if a is not None else 'no answer'} at {name} {fmt(lv)}" for lv, a in answers)
    distinct = {a for _lv, a in answers}
    if None in distinct:
        text = f"Whether {name} changes the answer cannot be told: not every level has a conclusive answer ({shown})."
    elif len(distinct) == 1:
        text = f"{name.capitalize()} does not change the answer at the tested resolution ({shown})."
    else:
        text = f"{name.capitalize()} changes the answer: {shown}."
    if eff is not None and eff.defined:
        text += f" Pooled over {q.name}, {name} {fmt(hi.level)} versus {fmt(lo.level)} changes the score by {_ci(eff)}."
    return text, eff
