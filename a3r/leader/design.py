"""Deterministic multi-stage experimental design: what to run next, given the goal and the evidence so far.

Stage 1 is a coarse grid: the studied variable at `grid_points` values (log-spaced for sizes and rates,
linear otherwise, or the goal's explicit set) crossed with the secondary variable's levels, each arm run
with `seeds` seeds. Every later stage follows from the previous evidence (`a3r.analysis.Evidence`):

- minimum/maximum: narrow the bracket between the answer and its failing neighbour with new values
  strictly inside it; add seeds to arms whose interval straddles the criterion;
- best: add values on both sides of the best arm (inside the gaps to its tested neighbours); add seeds to
  arms tied with it; dominated arms get nothing more;
  (new values only over a range or when the goal asks to refine: a named set is exactly the set studied)
- effect: add seeds to neighbouring levels whose intervals overlap, and to the extremes when the effect's
  interval contains 0;
- compare: add seeds to both sides of a tie.
Within a stage, `rung_step` (best/compare shapes with 3+ arms) asks the leader to stop dominated arms early
on their partial learning curves (successive halving, `a3r.analysis.dominated_arms`).

With `confirm` (the default) every stage before the last is exploration: it steers (which values, which
arms get seeds) and claims nothing. The answer comes from a confirmation stage: fresh seeds (numbers no
earlier stage used) on the arms the answer rests on, sized for 80% power (`a3r.leader.power`) and analysed
on its own runs at the full alpha, so its interval carries no winner's curse and the exploration's looks
cost no error rate. Its runs are reserved from the start: exploration only spends what the confirmation
leaves. Without `confirm` (e.g. a one-stage demo) the pooled evidence answers, at alpha / max_stages per
look, and a settled question still gets `min_stages` stages (more seeds on the arms it rests on).
No stage exceeds the runs left in `max_runs`. Added seeds continue each arm's seed numbers.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from a3r.analysis import ArmStats, Evidence, fmt
from a3r.analysis.evidence import cheaper_neighbour
from a3r.leader.goals import Factor, Goal
from a3r.leader.power import ConfirmationSize, confirmation_size, pooled_sd, power_at

__all__ = [
    "Arm",
    "BudgetError",
    "ResearchBudget",
    "STEPS_KEY",
    "steps_studied",
    "StageDesign",
    "arm_label",
    "arm_steps",
    "between",
    "first_stage",
    "grid",
    "next_stage",
    "research_stages",
    "steps_per_run",
]


class BudgetError(ValueError):
    """The budget cannot hold even the smallest sensible design; the message says what to raise.
    `needed` and `left` are the runs that design takes and the runs the budget still holds."""

    def __init__(self, message: str, *, needed: int, left: int):
        super().__init__(message)
        self.needed, self.left = needed, left


class ResearchBudget(BaseModel):
    """How much a campaign may spend, and how finely it searches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_stages: int = Field(4, ge=1, le=5, description="Stages at most (the reference study used 2 to 5).")
    min_stages: int = Field(
        2, ge=1, le=5, description="A question settled earlier still gets a confirmation stage."
    )
    max_runs: int = Field(48, ge=2, description="Runs (configuration x seed) over the whole campaign.")
    seeds: int = Field(
        3,
        ge=1,
        description="Seeds per new arm (at least min_seeds for a label), and seeds added per refinement.",
    )
    max_seeds: int = Field(
        12,
        ge=1,
        description="No arm gets more seeds than this in the exploration, nor in the confirmation (its own sample).",
    )
    min_seeds: int = Field(3, ge=2, description="Seeds an arm needs before it gets any pass/fail/best label.")
    alpha: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Error rate of the answer (the confirmation's; without one, spent over max_stages looks).",
    )
    confirm: bool = Field(
        True,
        description="Answer from a confirmation stage on fresh seeds alone (earlier stages only explore).",
    )
    effect: float | None = Field(
        None, gt=0, description="Smallest effect worth detecting, set by the calibration (sizes the confirmation)."
    )
    calibrate: bool = Field(
        True, description="Run a calibration (pilot) stage of the reference configuration before the grid."
    )
    pilot_seeds: int = Field(3, ge=2, description="Seeds of the calibration stage.")
    total_wall_s: float | None = Field(
        None,
        gt=0,
        description="Wall-clock budget of the whole campaign's runs; stages are trimmed to fit it.",
    )
    steps: int = Field(20, ge=1, description="Training steps per run (swarm.training.max_steps).")
    wall_time_s: float = Field(3600.0, gt=0, description="Wall-clock limit per attempt.")
    grid_points: int = Field(5, ge=2, description="Values of the studied variable in the stage-1 grid.")
    secondary_levels: int = Field(2, ge=2, description="Levels of a secondary numeric variable.")
    refine_points: int = Field(2, ge=1, description="New values per narrowed interval in later stages.")
    stage1_share: float = Field(0.6, gt=0, le=1, description="Largest share of max_runs stage 1 may take.")
    pair_seeds: bool = Field(
        True,
        description="Compare the confirmation's arms paired on seeds when the exploration shows it narrows the "
        "intervals (the same seed gives every arm the same task order and sampling streams).",
    )
    early_stop: bool = Field(
        False,
        description="Stop dominated arms at mid-training (best/compare shapes); each rung counts as a look.",
    )

    @model_validator(mode="after")
    def _check(self) -> ResearchBudget:
        if self.min_stages > self.max_stages:
            raise ValueError(f"min_stages ({self.min_stages}) exceeds max_stages ({self.max_stages})")
        if self.seeds > self.max_seeds:
            raise ValueError(f"seeds ({self.seeds}) exceeds max_seeds ({self.max_seeds})")
        if self.min_seeds > self.max_seeds:
            raise ValueError(f"min_seeds ({self.min_seeds}) exceeds max_seeds ({self.max_seeds})")
        return self

    @property
    def confirms(self) -> bool:
        """Whether the answer comes from a confirmation stage (it needs a stage before it to explore)."""
        return self.confirm and self.max_stages >= 2

    @property
    def looks(self) -> int:
        """Planned analysis looks that decide the answer. With a confirmation: one (exploration only
        steers; the confirmation's fresh seeds alone answer). Without: one per stage after calibration,
        plus each early-stop rung (it stops arms on an interval, so it spends error too)."""
        if self.confirms:
            return 1
        return self.max_stages * (2 if self.early_stop else 1)


class Arm(BaseModel):
    """One configuration of a stage and the seeds it runs with in that stage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    x: Any = Field(description="Value of the studied variable.")
    level: Any = Field(None, description="Value of the secondary variable (None without one).")
    seeds: list[int] = Field(min_length=1)
    why: str = Field(description="Why this arm is in the stage.")


class StageDesign(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=1, description="1-based stage number.")
    kind: Literal["calibration", "grid", "refine", "confirm"]
    purpose: str
    hypothesis: str
    arms: list[Arm] = Field(min_length=1)
    steps: int = Field(ge=1)
    rationale: list[str] = Field(default_factory=list, description="The evidence this design follows from.")
    rung_step: int | None = Field(None, description="Step at which dominated arms are stopped early.")
    author: str = Field(
        "offline", description="Who designed it: offline, or llm:<model> (its prose is vetted)."
    )
    planned_sigma: float | None = Field(
        None, description="A confirmation's sizing sigma (80% upper bound from the exploration runs)."
    )
    planned_effect: float | None = Field(None, description="The effect a confirmation was sized to detect.")
    planned_needed: int | None = Field(None, description="Seeds per arm that effect needs for 80% power.")

    @property
    def n_runs(self) -> int:
        return sum(len(a.seeds) for a in self.arms)


# -- value grids ----------------------------------------------------------------------------------------
def _round(factor: Factor, v: float) -> Any:
    if factor.knob.kind == "int":
        return int(round(v))
    return float(f"{v:.2g}")  # 2 significant digits: 3.2e-05, not 3.1622776e-05


def grid(factor: Factor, n: int) -> list[Any]:
    """`n` values over the factor's range (fewer if rounding merges some); its set or choices as given."""
    if factor.values is not None:
        vals = list(factor.values)
        return sorted(vals) if factor.knob.kind != "choice" else vals
    if factor.knob.scale == "log":
        raw = np.geomspace(factor.low, factor.high, n)
    else:
        raw = np.linspace(factor.low, factor.high, n)
    return sorted({_round(factor, v) for v in raw})


def between(factor: Factor, a: Any, b: Any, k: int, tested: set[Any]) -> list[Any]:
    """Up to `k` untested values strictly between `a` and `b`, spaced on the factor's scale."""
    lo, hi = sorted((a, b))
    if factor.knob.scale == "log" and lo > 0:
        raw = np.geomspace(lo, hi, k + 2)[1:-1]
    else:
        raw = np.linspace(lo, hi, k + 2)[1:-1]
    vals = {_round(factor, v) for v in raw}
    if factor.knob.kind == "int" and not vals - tested - {lo, hi} and hi - lo > 1:
        vals = {(lo + hi) // 2}  # rounding collapsed the points: bisect the integers instead
    return sorted(v for v in vals if lo < v < hi and v not in tested)


def arm_label(goal: Goal, x: Any, level: Any = None) -> str:
    """Short arm name for tables and run names, e.g. "bs=4,mt=32"."""
    label = f"{goal.factor.knob.short}={fmt(x)}"
    if goal.secondary is not None and level is not None:
        label += f",{goal.secondary.knob.short}={fmt(level)}"
    return label


# The engine's training steps: a goal may study them (goal 3 of docs/benchmarks/real_goals.md), and then
# every arm trains its own count, not the stage's.
STEPS_KEY = "swarm.training.max_steps"


def arm_steps(goal: Goal, x: Any, level: Any, steps: int) -> Any:
    """The training steps a run of arm (x, level) trains: its value when the steps are studied, else the
    stage's `steps` (as `train_job` sets them)."""
    if goal.factor.key == STEPS_KEY:
        return x
    if goal.secondary is not None and goal.secondary.key == STEPS_KEY:
        return level
    return steps


def steps_studied(goal: Goal) -> bool:
    """The training steps are a studied variable: every run trains its arm's count, not the stage's."""
    return STEPS_KEY in (goal.factor.key, goal.secondary.key if goal.secondary else None)


def steps_per_run(goal: Goal, steps: int) -> str:
    """A stage's training steps in words: "20 steps per run", or, when the steps are studied, that each
    run trains its arm's own (a stage line must not name one count for runs that train 1 to 8 steps)."""
    return "each run trains its arm's step count" if steps_studied(goal) else f"{steps} steps per run"


def _levels(goal: Goal, budget: ResearchBudget) -> list[Any]:
    return [None] if goal.secondary is None else grid(goal.secondary, budget.secondary_levels)


# -- stage 1 --------------------------------------------------------------------------------------------
def first_stage(
    goal: Goal, budget: ResearchBudget, prior: list[StageDesign] | None = None
) -> StageDesign | None:
    """The coarse grid, shrunk (fewer points, then fewer seeds, never below min_seeds) to fit
    `stage1_share` of the runs left after `prior` (calibration) stages. Configurations a prior stage ran
    at the same step count keep those seeds, so only their missing seeds count as new runs; None when the
    calibration already ran every arm's seeds (it piloted the other values too)."""
    prior = prior or []
    levels = _levels(goal, budget)
    used = {k: set(v) for k, v in _seeds_used([p for p in prior if p.steps == budget.steps]).items()}
    left = budget.max_runs - sum(p.n_runs for p in prior)
    # the last planned stage may spend everything left; otherwise keep room for refinement
    share = 1.0 if budget.max_stages <= research_stages(prior) + 1 else budget.stage1_share
    cap = max(2, math.floor(left * share))
    points, seeds = budget.grid_points, budget.seeds

    def missing(lv: Any, x: Any, k: int) -> list[int]:
        """Seeds the arm still needs: the reference keeps its pilot seeds and gets the rest, so it ends
        with the same seeds as every other arm (fewer would make it the least-measured arm)."""
        seen = used.get((lv, x), set())
        return [s for s in range(k) if s not in seen]

    def new_runs(xs: list[Any], k: int) -> int:
        return sum(len(missing(lv, x, k)) for lv in levels for x in xs)

    xs = grid(goal.factor, points)
    while new_runs(xs, seeds) > cap and goal.factor.values is None and points > 3:
        points -= 1
        xs = grid(goal.factor, points)
    while new_runs(xs, seeds) > cap and seeds > budget.min_seeds:
        seeds -= 1
    n = new_runs(xs, seeds)
    if n > left:
        raise BudgetError(
            f"the first stage needs {n} runs ({len(xs)} values x {len(levels)} levels x {seeds} seeds, at least "
            f"min_seeds={budget.min_seeds} per arm for any verdict) but the budget has {left} left; raise max_runs "
            "(or total_wall_s) or name fewer values",
            needed=n,
            left=left,
        )
    arms = [
        Arm(x=x, level=lv, seeds=keep, why="coarse grid")
        for lv in levels
        for x in xs
        if (keep := missing(lv, x, seeds))
    ]
    if not arms:
        return None
    sec = f" x {goal.secondary.name} {{{', '.join(fmt(v) for v in levels)}}}" if goal.secondary else ""
    purpose = (
        f"Stage {len(prior) + 1}, coarse grid: {goal.factor.name} {{{', '.join(fmt(x) for x in xs)}}}{sec}, "
        f"{seeds} seed(s) each, {steps_per_run(goal, budget.steps)}."
    )
    rationale = [f"Cover {goal.factor.describe()} coarsely before narrowing."]
    pooled = sorted({arm_label(goal, x, lv) for lv in levels for x in xs if used.get((lv, x))})
    if pooled:
        rationale.append(f"Pooled with the calibration runs: {', '.join(pooled)} keep their pilot seeds.")
    if seeds < budget.seeds:
        rationale.append(f"Seeds cut to {seeds} to fit {cap} runs ({budget.stage1_share:.0%} of the budget).")
    rung = _rung(goal, budget, len(arms))
    return StageDesign(
        index=len(prior) + 1,
        kind="grid",
        purpose=purpose,
        hypothesis=_hypothesis(goal),
        arms=arms,
        steps=budget.steps,
        rationale=rationale,
        rung_step=rung,
    )


def _rung(goal: Goal, budget: ResearchBudget, n_arms: int) -> int | None:
    if budget.early_stop and goal.shape in ("best", "compare") and n_arms >= 3 and budget.steps >= 4:
        return budget.steps // 2
    return None


def _hypothesis(goal: Goal) -> str:
    f = goal.factor.name
    return {
        "minimum": f"Below some {f} training falls short of the criterion ({goal.criterion.describe(goal.metric)}); "
        f"above it, it does not. Refuted if every tested {f} passes or none does.",
        "maximum": f"Above some {f} training falls short of the criterion ({goal.criterion.describe(goal.metric)}); "
        f"below it, it does not. Refuted if every tested {f} passes or none does.",
        "best": f"One {f} scores clearly higher than the others; refuted if the intervals overlap throughout.",
        "effect": f"Changing {f} changes the score; refuted if the difference's interval contains 0.",
        "compare": f"The compared {f} values train differently; refuted if the difference's interval contains 0.",
    }[goal.shape]


# -- later stages ---------------------------------------------------------------------------------------
def _seeds_used(stages: list[StageDesign]) -> dict[tuple[Any, Any], list[int]]:
    used: dict[tuple[Any, Any], list[int]] = {}
    for st in stages:
        for a in st.arms:
            used.setdefault((a.level, a.x), []).extend(a.seeds)
    return used


class _Proposals:
    """Arms proposed for the next stage, in priority order, with the seed bookkeeping."""

    def __init__(self, budget: ResearchBudget, used: dict[tuple[Any, Any], list[int]]):
        self.budget, self.used = budget, used
        self.arms: list[Arm] = []
        self.rationale: list[str] = []

    def has(self, level: Any, x: Any) -> bool:
        return any(a.level == level and a.x == x for a in self.arms)

    def new(self, level: Any, x: Any, why: str) -> None:
        if (level, x) not in self.used and not self.has(level, x):
            self.arms.append(Arm(x=x, level=level, seeds=list(range(self.budget.seeds)), why=why))

    def more_seeds(self, arm: ArmStats, why: str) -> bool:
        seen = self.used.get((arm.level, arm.x), [])
        room = self.budget.max_seeds - len(seen)
        if room <= 0 or self.has(arm.level, arm.x):
            return False
        start = max(seen, default=-1) + 1
        self.arms.append(
            Arm(
                x=arm.x,
                level=arm.level,
                seeds=list(range(start, start + min(room, self.budget.seeds))),
                why=why,
            )
        )
        return True


def research_stages(stages: list[StageDesign]) -> int:
    """Stages that answer the question (calibration stages do not count against max_stages)."""
    return sum(1 for s in stages if s.kind != "calibration")


def next_stage(
    goal: Goal, budget: ResearchBudget, stages: list[StageDesign], ev: Evidence
) -> StageDesign | None:
    """The next stage's design from the pooled evidence of all stages so far, or None to finish.

    Nothing is refined when nothing trains: more seeds on arms that cannot differ only refine noise."""
    index = len(stages) + 1
    done = research_stages(stages)
    remaining = budget.max_runs - sum(s.n_runs for s in stages)
    confirmed = budget.confirms and any(s.kind == "confirm" for s in stages)
    if done >= budget.max_stages or remaining < 1 or ev.nothing_trains or confirmed:
        return None
    props = _Proposals(budget, _seeds_used(stages))
    tested = {(a.level, a.x) for st in stages for a in st.arms}
    for le in ev.levels:
        xs = {x for lv, x in tested if lv == le.level}
        where = f"at {goal.secondary.name} {fmt(le.level)}: " if goal.secondary is not None else ""
        if le.threshold is not None:
            _propose_threshold(goal, budget, le, xs, props, where)
        elif le.compare is not None:
            if le.compare.winner is None:
                props.rationale.append(f"{where}{le.compare.verdict} More seeds on both.")
                props.more_seeds(le.compare.a, "no difference shown yet: more seeds")
                props.more_seeds(le.compare.b, "no difference shown yet: more seeds")
        elif le.effect is not None:
            _propose_effect(le, props, where)
        elif le.best is not None:
            _propose_best(goal, budget, le, xs, props, where)
    if budget.confirms:
        return _explore_or_confirm(goal, budget, stages, ev, props, index, remaining)
    kind: Literal["refine", "confirm"] = "refine"
    if not props.arms and done < budget.min_stages:
        kind = "confirm"
        for le in ev.levels:
            for arm in _key_arms(le):
                props.more_seeds(arm, "confirmation: more seeds on the arms the answer rests on")
        if props.arms:
            props.rationale.append(
                "The question looks settled; a confirmation stage re-runs the arms the answer rests on with new seeds."
            )
    arms = _fit(props.arms, remaining)
    if not arms:
        return None
    if len(arms) < len(props.arms):
        props.rationale.append(f"Trimmed to {remaining} run(s) left in the budget.")
    return _stage(goal, budget, stages, arms, kind, props.rationale, index)


def _may_add_values(goal: Goal) -> bool:
    """In-between values only over a range, or when the goal asks for them: a named set is the set studied."""
    return goal.factor.knob.kind != "choice" and (goal.factor.values is None or goal.refine)


def _confirm_arms(goal: Goal, le) -> list[ArmStats]:
    """The arms a confirmation re-runs at one level: every arm the answer is compared with.
    Best (and compare/effect read as best): every arm when there are at most 3 (a claim about an arm that
    was not confirmed would rest on exploration's uncorrected looks); with more, the leader, its runner-up
    and every arm exploration did not show worse. Compare: both. Threshold: the answer, its neighbour and
    the reference (the generous end, whose gain the relative criterion scales), and, when exploration did
    not show the neighbour to fail, the tested value just cheaper than the neighbour: the neighbour may be
    the true answer, and the confirmation can then show it (it passes, the value beyond it fails) instead of
    only refuting the exploration's answer; without an answer, none."""
    if le.threshold is not None:
        th = le.threshold
        if th.answer is None:
            return []
        keep = [th.answer, th.neighbour, th.reference]
        if th.neighbour is not None and th.status.get(th.neighbour.label) != "fail":
            keep.append(cheaper_neighbour(le.arms, th.neighbour.x, th.direction))
        return list({a.label: a for a in keep if a is not None}.values())
    if le.compare is not None:
        return [le.compare.a, le.compare.b]
    best = le.best
    if best is None or best.best is None:
        return []
    if len(le.arms) <= 3:
        return list(le.arms)
    runner_up = max((a for a in le.arms if a is not best.best), key=lambda a: a.interval.mean)
    return list({a.label: a for a in (best.best, runner_up, *best.tied)}.values())


def _confirmation_size(goal: Goal, budget: ResearchBudget, ev: Evidence, arms: int) -> ConfirmationSize:
    """Seeds per arm the confirmation needs, from every exploration arm's per-seed spread pooled."""
    q = ev.question
    threshold = goal.shape in ("minimum", "maximum")
    groups = [a.gains if threshold else a.scores for le in ev.levels for a in le.arms]
    sd, df = pooled_sd(groups)
    floor = q.floor_sd(0.0)
    effect = budget.effect or max(sd, floor, 1e-9)  # without a calibration: one sd, said in the rationale
    return confirmation_size(
        goal.shape,
        arms,
        sd,
        df,
        effect,
        alpha=budget.alpha,
        min_seeds=budget.min_seeds,
        max_seeds=budget.max_seeds,
        floor_sd=floor,
    )


def _explore_or_confirm(
    goal: Goal,
    budget: ResearchBudget,
    stages: list[StageDesign],
    ev: Evidence,
    props: _Proposals,
    index: int,
    remaining: int,
) -> StageDesign | None:
    """With a confirmation: another exploration stage while the stage and run budgets leave room for the
    confirmation after it, otherwise the confirmation itself (fresh seeds, sized for 80% power)."""
    done = research_stages(stages)
    per_level = [_confirm_arms(goal, le) for le in ev.levels]
    n_arms = sum(len(a) for a in per_level)
    if n_arms == 0 or any(len(a) < 2 for a in per_level):
        # nothing to confirm at some level (no answer, or one arm): explore if the budget allows, else finish
        arms = _fit(props.arms, remaining) if done + 1 < budget.max_stages else []
        return _stage(goal, budget, stages, arms, "refine", props.rationale, index) if arms else None
    size = _confirmation_size(goal, budget, ev, max(len(a) for a in per_level))
    reserve = size.seeds * n_arms
    # explore only when the whole proposal fits beside the reserve: a trimmed exploration stage buys little
    # and its cost is the confirmation's seeds
    fits = sum(len(a.seeds) for a in props.arms) <= remaining - reserve
    explore = props.arms if fits and props.arms and done + 1 < budget.max_stages else []
    if explore:
        props.rationale.append(
            f"{reserve} run(s) stay reserved for the confirmation ({size.seeds} fresh seed(s) x {n_arms} arm(s))."
        )
        return _stage(goal, budget, stages, explore, "refine", props.rationale, index)
    seeds = min(size.seeds, remaining // n_arms)
    if seeds < budget.min_seeds:
        return None  # the runs left cannot hold a confirmation with labels: the answer stays unconfirmed
    used = _seeds_used(stages)
    # the same seed numbers for every arm (none of them ran any before), so arms can be paired on seeds
    start = 1 + max((s for lv in per_level for a in lv for s in used.get((a.level, a.x), [])), default=-1)
    arms = []
    for lv_arms in per_level:
        for a in lv_arms:
            arms.append(
                Arm(
                    x=a.x,
                    level=a.level,
                    seeds=list(range(start, start + seeds)),
                    why="confirmation: fresh seeds, analysed on their own",
                )
            )
    why = [
        f"Confirmation on fresh seeds: {', '.join(a.label for lv in per_level for a in lv)}, {seeds} seed(s) each, "
        f"analysed on these runs alone at the full alpha {budget.alpha}. Sized for 80% power against an effect of "
        f"{fmt(size.effect)} with sigma {fmt(size.sigma)} (80% upper bound from the exploration runs): "
        f"{size.needed} seed(s) per arm."
    ]
    if seeds < size.needed:
        why.append(
            f"The budget holds {seeds} seed(s) per arm: planned power "
            f"{fmt(100 * _power_at(goal, budget, ev, size, seeds))}%, below 80%; "
            f"{size.runs_needed} confirmation run(s) would reach it."
        )
    return _stage(goal, budget, stages, arms, "confirm", why, index).model_copy(
        update={"planned_sigma": size.sigma, "planned_effect": size.effect, "planned_needed": size.needed}
    )


def _power_at(goal: Goal, budget: ResearchBudget, ev: Evidence, size: ConfirmationSize, seeds: int) -> float:
    return power_at(goal.shape, size.arms, seeds, size.sigma, size.effect, budget.alpha, ev.question.floor_sd(0.0))


def _stage(
    goal: Goal,
    budget: ResearchBudget,
    stages: list[StageDesign],
    arms: list[Arm],
    kind: Literal["refine", "confirm"],
    rationale: list[str],
    index: int,
) -> StageDesign:
    """A stage of `arms` after `stages`: its purpose line counts the values not tested before."""
    tested = {(a.level, a.x) for st in stages for a in st.arms}
    n_new = sum(1 for a in arms if (a.level, a.x) not in tested)
    purpose = (
        f"Stage {index}, {kind}: {len(arms)} arm(s) ({n_new} new value(s), {len(arms) - n_new} with added seeds), "
        f"{sum(len(a.seeds) for a in arms)} run(s), {steps_per_run(goal, budget.steps)}."
    )
    return StageDesign(
        index=index,
        kind=kind,
        purpose=purpose,
        hypothesis=_hypothesis(goal),
        arms=arms,
        steps=budget.steps,
        rationale=rationale,
        rung_step=_rung(goal, budget, len(arms)) if kind == "refine" else None,
    )


def _propose_threshold(goal, budget, le, xs, props: _Proposals, where: str) -> None:
    th, level = le.threshold, le.level
    if not th.trained:
        props.rationale.append(f"{where}{th.verdict}")
        return
    if th.answer is not None and th.neighbour is not None and _may_add_values(goal):
        inside = between(goal.factor, th.neighbour.x, th.answer.x, budget.refine_points, xs)
        for x in inside:
            props.new(level, x, f"narrow between {fmt(th.neighbour.x)} and {fmt(th.answer.x)}")
        if inside:
            what = "fails" if th.status.get(th.neighbour.label) == "fail" else "is uncertain"
            props.rationale.append(
                f"{where}{fmt(th.answer.x)} passes and {fmt(th.neighbour.x)} {what}; testing "
                f"{', '.join(fmt(x) for x in inside)} in between."
            )
    # the arms next to the boundary first: their status decides the answer
    target = goal.criterion.value if goal.criterion.kind == "absolute" else 0.0
    boundary = [a for a in (th.neighbour, th.answer) if a is not None]
    others = sorted(
        (a for a in le.arms if a not in boundary), key=lambda a: abs(th.tests[a.label].mean - target)
    )
    for a in boundary + others:
        iv = th.tests[a.label]
        if th.status.get(a.label) == "uncertain" and props.more_seeds(
            a, "its test against the criterion is undecided"
        ):
            props.rationale.append(
                f"{where}{a.label}: difference to the criterion {fmt(iv.mean)} [{fmt(iv.lo)}, {fmt(iv.hi)}] is undecided; "
                "adding seeds."
            )


def _propose_best(goal, budget, le, xs, props: _Proposals, where: str) -> None:
    best = le.best
    if best.best is None:
        props.rationale.append(f"{where}{best.verdict}")
        return
    if _may_add_values(goal):
        ordered = sorted(xs)
        i = ordered.index(best.best.x)
        for nb in (ordered[i - 1] if i > 0 else None, ordered[i + 1] if i + 1 < len(ordered) else None):
            if nb is None:
                continue
            inside = between(goal.factor, nb, best.best.x, 1, xs)
            for x in inside:
                props.new(le.level, x, f"refine around the best ({fmt(best.best.x)})")
            if inside:
                props.rationale.append(
                    f"{where}best so far {fmt(best.best.x)}; testing {fmt(inside[0])} towards {fmt(nb)}."
                )
    for a in (best.best, *best.tied) if best.tied else ():
        if props.more_seeds(a, "not yet separated from the best"):
            props.rationale.append(f"{where}{a.label} is not separated from the best; adding seeds.")
    if best.dominated:
        props.rationale.append(
            f"{where}dropped as shown worse than the best: {', '.join(a.label for a in best.dominated)}."
        )


def _propose_effect(le, props: _Proposals, where: str) -> None:
    eff = le.effect
    by_label = {a.label: a for a in le.arms}
    if eff.direction in ("none", "unknown"):
        for a in (eff.low, eff.high):
            props.more_seeds(a, "effect not settled")
        props.rationale.append(f"{where}{eff.verdict} Adding seeds at both ends.")
    for la, lb in eff.overlapping_neighbours:
        for a in (by_label[la], by_label[lb]):
            if props.more_seeds(a, "neighbouring levels overlap"):
                props.rationale.append(f"{where}{a.label} overlaps its neighbour; adding seeds.")


def _key_arms(le) -> list[ArmStats]:
    """The arms an answer rests on: threshold answer and neighbour, the best and its runner-up, A and B."""
    if le.threshold is not None:
        th = le.threshold
        if th.answer is None:
            return [max(le.arms, key=lambda a: a.interval.mean)]
        return [a for a in (th.answer, th.neighbour) if a is not None]
    if le.compare is not None:
        return [le.compare.a, le.compare.b]
    if le.effect is not None:
        return [le.effect.low, le.effect.high]
    ranked = sorted(le.arms, key=lambda a: -a.interval.mean)
    return ranked[:2]


def _fit(arms: list[Arm], remaining: int) -> list[Arm]:
    """Keep arms in priority order while they fit; the last one may get fewer seeds."""
    out, left = [], remaining
    for a in arms:
        if left <= 0:
            break
        if len(a.seeds) > left:
            a = a.model_copy(update={"seeds": a.seeds[:left]})
        out.append(a)
        left -= len(a.seeds)
    return out
