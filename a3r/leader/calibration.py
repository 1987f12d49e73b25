"""The calibration (pilot) stage: is training visible at this budget, how noisy is the score, what does a
run cost, and how many seeds does the question need?

Before any grid, the leader runs the *reference configuration* (the generous end of the studied range for
minimum/maximum questions, the middle value otherwise) for `pilot_seeds` seeds and measures, from the same
held-out score the analysis uses:
- the untrained level (step 0) and the gain over it, with a 95% t interval;
- sigma, the seed-to-seed sd of the gain (never below the evaluation set's binomial noise);
- seconds per run.
Training is *visible* when the gain interval clears 0. Then the campaign is sized: seeds per arm for 80%
power against the smallest effect worth reporting (`EFFECT_FRACTION` of the reference gain, or the goal's
own criterion fraction), planned with the rule the answer's analysis uses (`a3r.leader.power`) and the 80%
upper confidence bound on sigma, and no more runs than the remaining wall budget holds. With a confirmation
(the default) the grid explores with the budget's seeds and the confirmation gets the power; the sizing
says what power the budget buys and, below 80%, the runs and wall time that would reach it. When training is not visible
the leader calibrates once more (`recalibration`, at most `MAX_CALIBRATIONS` in all):
- when the reference is not the generous end of a range (compare, best and effect questions, and a
  threshold over named choices) and the first grid has values not yet piloted, those values run on the
  same pilot seeds at the same steps (`pilot_others`): the reference failing to train says nothing about
  the values the question compares it with. Their runs are the grid's (`pool_seeds` keeps them);
- otherwise it re-pilots with twice the steps if the budget holds it and the reference configuration would
  train more steps (`repilot_steps`: not when the goal names the run length, studies the steps or fixes
  them, where a re-pilot would answer another question or repeat the same runs);
and otherwise stops with advice (`no_training_advice`) instead of comparing arms that cannot differ.

With several arms piloted (`measure_arms`), training is visible when any arm's gain interval clears 0; sigma
is the within-arm sd pooled over every piloted arm's gains (their df add up, and it is not read only from
the arm that trains); the effect is `EFFECT_FRACTION` of the gain of the visible arm with the largest gain.
That gain was selected for clearing 0 (and for being the largest), so it is biased upward: the effect is
sized somewhat large and the planned seeds somewhat few, which the confirmation partly repairs by re-sizing
sigma from every exploration run (the effect stays the calibration's).

Pure functions over run records and budgets; the graph calls them.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a3r.analysis import fmt, t_interval
from a3r.analysis.evidence import MIN_EFFECT, shows_training
from a3r.analysis.stats import resolution_sd
from a3r.leader.design import (
    STEPS_KEY,
    Arm,
    ResearchBudget,
    StageDesign,
    arm_label,
    arm_steps,
    grid,
    steps_per_run,
)
from a3r.leader.goals import Goal
from a3r.leader.knobs import get_dotted, knob_value
from a3r.leader.power import TARGET_POWER, confirmation_size, pooled_sd, power_at

__all__ = [
    "EFFECT_FRACTION",
    "Calibration",
    "answer_arms",
    "calibration_stage",
    "grid_run_seconds",
    "PilotArm",
    "measure",
    "measure_arms",
    "no_training_advice",
    "pilot_others",
    "pool_seeds",
    "recalibration",
    "reference_arm",
    "repilot_steps",
    "size_budget",
    "wall_budget_advice",
]

# The smallest effect a comparison is sized to detect: half the reference configuration's gain (the same
# fraction below which the analysis says an arm does not train).
EFFECT_FRACTION = MIN_EFFECT
MAX_CALIBRATIONS = 2  # the first pilot and at most one more: the other values, or the reference with more steps


class PilotArm(BaseModel):
    """One piloted arm's gain over the untrained level (plain data)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    runs: int
    gain: float
    gain_lo: float | None = None
    gain_hi: float | None = None
    visible: bool


class Calibration(BaseModel):
    """What the pilot measured and what the leader concluded from it (plain data: it lives in the state)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: int = Field(description="Stage index of the calibration runs.")
    label: str = Field(description="The arm that calibrates: the reference, or the piloted arm that trains.")
    steps: int
    runs: int = Field(description="Calibration runs at these steps that produced a score (every piloted arm).")
    untrained: float = Field(description="Mean step-0 score.")
    gain: float = Field(description="Mean gain over the untrained level.")
    gain_lo: float | None = None
    gain_hi: float | None = None
    sigma: float = Field(description="Seed-to-seed sd of the gain, floored by the evaluation noise.")
    sigma_plan: float = Field(0.0, description="Sigma the seeds are planned with: its 80% upper confidence bound.")
    run_s: float = Field(description="Mean wall seconds per calibration run.")
    visible: bool = Field(description="The gain's 95% interval lies above 0.")
    effect: float = Field(0.0, description="Effect the grid is sized to detect.")
    seeds_per_arm: int = Field(0, description="Seeds per arm the power calculation asks for (before caps).")
    arms: int = Field(0, description="Arms the answer's analysis compares (the sizing rule's k).")
    power: float | None = Field(None, description="Power the budget buys at its capped seeds (planned).")
    piloted: list[PilotArm] = Field(
        default_factory=list, description="Every arm piloted at these steps (sigma pools their gains)."
    )
    note: str = ""

    def gains_text(self) -> str:
        """The piloted gains in words: "0.13 [-0.25, 0.51]", or per arm when several were piloted."""
        def one(g: Any) -> str:
            return f"{fmt(g.gain)} [{fmt(g.gain_lo)}, {fmt(g.gain_hi)}]" if g.gain_lo is not None else fmt(g.gain)

        if len(self.piloted) <= 1:
            return f"a gain of {one(self)}"
        return "gains of " + ", ".join(f"{g.label} {one(g)}" for g in self.piloted)


def reference_arm(
    goal: Goal, budget: ResearchBudget, base_job: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """(x, level) of the reference configuration, fixed by the question and the base job, never by data:
    for minimum/maximum the generous end of the range (the one that should train if any does); otherwise
    the configuration the researcher runs without the study (the base job's value of the variable), or
    the tested value nearest it. The second factor's level is its first, except for the training steps:
    their generous end is the most-trained level (the first would calibrate the least-trained runs and
    advise "larger" counts the question may already hold)."""
    xs = grid(goal.factor, budget.grid_points)
    level = _reference_level(goal, budget)
    if goal.shape == "minimum" and goal.factor.knob.kind != "choice":
        return xs[-1], level
    if goal.shape == "maximum" and goal.factor.knob.kind != "choice":
        return xs[0], level
    usual = _usual_value(goal, base_job or {})
    if usual in xs:
        return usual, level
    if usual is None or goal.factor.knob.kind == "choice":
        return xs[0], level
    log = goal.factor.knob.scale == "log" and usual > 0 and min(xs) > 0
    dist = (lambda v: abs(math.log(v / usual))) if log else (lambda v: abs(v - usual))
    return min(xs, key=dist), level


def _reference_level(goal: Goal, budget: ResearchBudget) -> Any:
    """The second factor's level in the reference configuration (None without a second factor)."""
    if goal.secondary is None:
        return None
    levels = grid(goal.secondary, budget.secondary_levels)
    return max(levels) if goal.secondary.key == STEPS_KEY else levels[0]


def _usual_value(goal: Goal, base_job: dict[str, Any]) -> Any:
    """The studied variable's value in a run of the base job with the goal's fixed settings (engine
    defaults filled in), or None when the job does not validate."""
    from pydantic import ValidationError

    from a3r.blueprints import deep_merge
    from a3r.leader.knobs import knob_value, set_knob_value
    from engine.jobs import TrainJob

    data = deep_merge(base_job, {})
    for key, value in goal.fixed.items():
        set_knob_value(data, key, value)
    try:
        return knob_value(TrainJob.model_validate(data).model_dump(mode="json"), goal.factor.key)
    except (ValidationError, ValueError):
        return None


def calibration_stage(
    goal: Goal,
    budget: ResearchBudget,
    index: int = 1,
    steps: int | None = None,
    base_job: dict[str, Any] | None = None,
) -> StageDesign:
    """The pilot: the reference configuration for `pilot_seeds` seeds at `steps` (default the budget's)."""
    x, level = reference_arm(goal, budget, base_job)
    steps = steps or budget.steps
    label = arm_label(goal, x, level)
    trains = arm_steps(goal, x, level, steps)  # the reference's own value when the steps are studied
    first = index == 1
    return StageDesign(
        index=index,
        kind="calibration",
        purpose=(
            f"Stage {index}, calibration{'' if first else ' again with more steps'}: the reference configuration "
            f"{label} for {budget.pilot_seeds} seeds, {trains} steps each, to measure the untrained level, the gain, "
            "its noise and the cost of a run before sizing the grid."
        ),
        hypothesis=(
            f"Training {goal.task} is visible within {trains} steps: the reference configuration's gain in "
            f"{goal.metric} over its untrained level has a 95% interval above 0."
        ),
        arms=[
            Arm(
                x=x,
                level=level,
                seeds=list(range(budget.pilot_seeds)),
                why="calibration (reference configuration)",
            )
        ],
        steps=steps,
        rationale=[
            "Measure before comparing: if the reference configuration does not train, no arm can be named best.",
        ],
    )


def measure(
    goal: Goal,
    budget: ResearchBudget,
    design: StageDesign,
    scores: list[tuple[float, float]],
    wall_s: list[float],
    *,
    eval_items: int | None,
) -> Calibration:
    """The calibration from a one-arm pilot's runs: `scores` = (step-0 score, final score) per scored run,
    `wall_s` the wall seconds of every finished run."""
    arm = design.arms[0]
    return measure_arms(goal, budget, design, {arm_label(goal, arm.x, arm.level): scores}, wall_s, eval_items=eval_items)


def measure_arms(
    goal: Goal,
    budget: ResearchBudget,
    design: StageDesign,
    by_arm: dict[str, list[tuple[float, float]]],
    wall_s: list[float],
    *,
    eval_items: int | None,
) -> Calibration:
    """The calibration after `design`, from every arm piloted at its steps: `by_arm` = arm label ->
    (step-0 score, final score) per scored run (an earlier pilot's arms included), `wall_s` the wall seconds
    of their finished runs. Visible when any arm's gain interval clears 0; the arm that calibrates is the
    visible one with the largest gain (the largest gain when none is visible); sigma pools every arm's
    gains (see the module docstring for the effect's bias)."""
    run_s = statistics.fmean(wall_s) if wall_s else 0.0
    scored = {k: v for k, v in by_arm.items() if v}
    if not scored:
        return Calibration(
            stage=design.index,
            label=", ".join(arm_label(goal, a.x, a.level) for a in design.arms),
            steps=design.steps,
            runs=0,
            untrained=math.nan,
            gain=math.nan,
            sigma=math.nan,
            run_s=run_s,
            visible=False,
            note="no calibration run produced a score",
        )
    floor = resolution_sd(eval_items) if eval_items else 0.0
    gains = {k: [end - start for start, end in v] for k, v in scored.items()}
    ivs = {k: t_interval(g, floor_sd=floor) for k, g in gains.items()}
    piloted = [
        PilotArm(
            label=k,
            runs=len(gains[k]),
            gain=iv.mean,
            gain_lo=iv.lo if iv.defined else None,
            gain_hi=iv.hi if iv.defined else None,
            visible=shows_training(iv),
        )
        for k, iv in ivs.items()
    ]
    shown = [p.label for p in piloted if p.visible]
    label = max(shown or list(ivs), key=lambda k: ivs[k].mean)
    iv = ivs[label]
    sd, df = pooled_sd(list(gains.values()))
    sigma = max(sd, floor)
    cal = Calibration(
        stage=design.index,
        label=label,
        steps=design.steps,
        runs=sum(len(g) for g in gains.values()),
        untrained=statistics.fmean(s for v in scored.values() for s, _e in v),
        gain=iv.mean,
        gain_lo=iv.lo if iv.defined else None,
        gain_hi=iv.hi if iv.defined else None,
        sigma=sigma,
        run_s=run_s,
        visible=bool(shown),
        piloted=piloted,
    )
    if not shown:
        return cal
    relative = (
        goal.shape in ("minimum", "maximum")
        and goal.criterion.kind == "relative"
        and goal.criterion.value > 0
    )
    fraction = goal.criterion.value if relative else EFFECT_FRACTION
    effect = max(fraction * iv.mean, 1e-9)
    arms = answer_arms(goal, budget)
    size = confirmation_size(
        goal.shape,
        arms,
        sigma,
        df,
        effect,
        alpha=budget.alpha / budget.looks,
        min_seeds=budget.min_seeds,
        max_seeds=budget.max_seeds,
        floor_sd=floor,
    )
    return cal.model_copy(
        update={
            "effect": effect,
            "seeds_per_arm": size.needed,
            "sigma_plan": size.sigma,
            "arms": arms,
            "power": size.power,
        }
    )


def answer_arms(goal: Goal, budget: ResearchBudget) -> int:
    """Arms the answer's analysis compares at one level: every grid value for best-like questions (at most
    3 are confirmed together beyond the leader and runner-up: see `design._confirm_arms`), the answer, its
    neighbour, the value beyond an uncertain neighbour and the reference for thresholds, two for
    compare/effect."""
    k = len(grid(goal.factor, budget.grid_points))
    if goal.shape in ("minimum", "maximum"):
        return min(4, k)
    return k if k <= 3 else 3


def grid_run_seconds(goal: Goal, budget: ResearchBudget, cal: Calibration, base_job: dict[str, Any]) -> float:
    """Expected wall seconds per run of the grid: the calibration's measured cost, scaled by the cost
    model's ratio between a grid arm and the reference (a batch of 2 costs less than one of 8). Averaged
    over the arms the grid will run: the reference keeps its pilot seeds, so its (often the highest) cost
    would make the wall budget hold fewer runs than it does."""
    from a3r.leader.blueprints import train_job
    from a3r.leader.costs import run_seconds

    def prior(x: Any, level: Any) -> float | None:
        job = train_job(goal, Arm(x=x, level=level, seeds=[0], why="cost"), cal.steps, base_job)
        return run_seconds(job, cal.steps)

    if len(cal.piloted) > 1:  # the pilot already ran the grid's values: its mean cost is theirs
        return cal.run_s
    reference = reference_arm(goal, budget, base_job)
    ref = prior(*reference)
    levels = [None] if goal.secondary is None else grid(goal.secondary, budget.secondary_levels)
    combos = [(x, lv) for x in grid(goal.factor, budget.grid_points) for lv in levels]
    arms = [prior(x, lv) for x, lv in combos if (x, lv) != reference] or [ref]
    if not ref or not arms or any(a is None for a in arms):
        return cal.run_s
    return cal.run_s * (sum(arms) / len(arms)) / ref


def size_budget(
    goal: Goal,
    budget: ResearchBudget,
    cal: Calibration,
    runs_done: int,
    wall_spent_s: float,
    per_run_s: float | None = None,
    slots: int = 1,
) -> tuple[ResearchBudget, list[str]]:
    """The budget the grid runs under, and why: calibrated steps, seeds per arm within [min_seeds,
    max_seeds], and no more runs than the remaining wall budget holds at the measured cost per run on
    `slots` slots (a run's measured cost is its own wall time: `slots` of them run at once)."""
    from a3r.leader.costs import runs_within

    why = []
    max_runs = budget.max_runs
    per_run = per_run_s or cal.run_s
    if budget.total_wall_s is not None and per_run > 0:
        left = runs_within(budget.total_wall_s - wall_spent_s, per_run, slots)
        if runs_done + left < max_runs:
            max_runs = runs_done + left
            why.append(
                f"The wall budget ({fmt(budget.total_wall_s)} s, {fmt(wall_spent_s)} s spent) holds about {left} more "
                f"run(s) at about {fmt(per_run)} s each on {slots} slot(s) (the calibration's measured cost, "
                "scaled per arm)."
            )
    if budget.confirms:
        # the grid explores with the researcher's seeds; the confirmation's fresh seeds carry the power
        seeds = min(max(budget.seeds, budget.min_seeds), budget.max_seeds)
        levels = 1 if goal.secondary is None else budget.secondary_levels
        grid_runs = len(grid(goal.factor, budget.grid_points)) * levels * seeds - cal.runs
        room = max(0, max_runs - runs_done - grid_runs)
        held = min(budget.max_seeds, room // max(cal.arms * levels, 1))  # the confirmation runs at every level
        needed_runs = runs_done + grid_runs + cal.seeds_per_arm * cal.arms * levels
    else:
        seeds = held = min(max(cal.seeds_per_arm, budget.seeds, budget.min_seeds), budget.max_seeds)
        needed_runs = runs_done + len(grid(goal.factor, budget.grid_points)) * cal.seeds_per_arm - cal.runs
    power = (
        power_at(goal.shape, cal.arms, held, cal.sigma_plan, cal.effect, budget.alpha / budget.looks, 0.0)
        if held >= 2 and cal.sigma_plan > 0 and cal.arms
        else 0.0
    )
    what = "the confirmation" if budget.confirms else "the grid"
    why.append(
        f"Power: {what} needs {cal.seeds_per_arm} seed(s) per arm x {cal.arms} arm(s) for {TARGET_POWER:.0%} power "
        f"against an effect of {fmt(cal.effect)} (sigma planned at {fmt(cal.sigma_plan)}, the 80% upper bound of "
        f"the pilot's {fmt(cal.sigma)}); the budget holds {held} per arm: {fmt(100 * power)}% power."
    )
    if power < TARGET_POWER:
        more = math.ceil(max(0, needed_runs - runs_done) * per_run) if per_run > 0 else None
        why.append(
            f"Below {TARGET_POWER:.0%}: an answer is unlikely at this budget. {TARGET_POWER:.0%} needs about "
            f"{needed_runs} runs in all (--budget max_runs={needed_runs},max_seeds={max(cal.seeds_per_arm, budget.max_seeds)}"
            + (f"; about {more} s of run time from here at {fmt(per_run)} s per run" if more is not None else "")
            + ")."
        )
    upd = {
        "seeds": seeds,
        "steps": cal.steps,
        "max_runs": max(max_runs, runs_done + 1),
        "effect": cal.effect if cal.effect > 0 else None,
    }
    return budget.model_copy(update=upd), why


def pool_seeds(design: StageDesign, earlier: list[StageDesign]) -> StageDesign | None:
    """The design with seeds already run for the same configuration (in calibration) removed, so the
    reference arm pools its pilot runs instead of repeating them; None if nothing is left to run."""
    used: dict[tuple[Any, Any], set[int]] = {}
    for st in earlier:
        if st.steps != design.steps:
            continue  # a pilot at other steps measured another configuration
        for a in st.arms:
            used.setdefault((a.level, a.x), set()).update(a.seeds)
    arms = []
    for a in design.arms:
        seen = used.get((a.level, a.x), set())
        keep = [s for s in a.seeds if s not in seen]
        if keep:
            arms.append(a.model_copy(update={"seeds": keep}))
    if not arms:
        return None
    if len(arms) == len(design.arms) and all(
        len(a.seeds) == len(b.seeds) for a, b in zip(arms, design.arms, strict=True)
    ):
        return design
    pooled = [a for a in design.arms if (a.level, a.x) in used]
    note = (
        f"Pooled with the calibration runs: {', '.join(sorted({str(a.x) for a in pooled}))} keep their pilot seeds "
        "and only get the missing ones."
    )
    return design.model_copy(update={"arms": arms, "rationale": [*design.rationale, note]})


def wall_budget_advice(
    budget: ResearchBudget, needed: int, left: int, per_run_s: float, spent_s: float, campaign: str = "<campaign>"
) -> str:
    """The answer when training is visible but the budget cannot hold the first comparison: "cannot tell",
    with the budget that would hold it (at the measured cost per run) and the command that continues this
    campaign under it, keeping every finished run."""
    total = budget.total_wall_s
    if total is not None:
        held = f"the wall budget ({fmt(total)} s, {fmt(spent_s)} s spent) holds {left} more at about {fmt(per_run_s)} s each"
        more = f"total_wall_s={math.ceil((spent_s + needed * per_run_s) / 60) * 60}"
    else:
        held = f"the run budget (max_runs {budget.max_runs}) holds {left} more"
        more = f"max_runs={budget.max_runs - left + needed}"
    return (
        f"Cannot tell: the budget is spent before any comparison. Training is visible, but the first stage needs "
        f"{needed} run(s) and {held}. To answer, continue this campaign with `a3r resume {campaign} --budget "
        f"{more}` (its finished runs are kept and pooled, none is rerun), or name fewer values or seeds."
    )


def _trained_steps(goal: Goal, arm: Arm, steps: int, base_job: dict[str, Any] | None) -> int:
    """The steps a run of `arm` trains in a stage of `steps`, read from the job the worker gets (a studied
    or fixed step count overrides the stage's)."""
    from a3r.leader.blueprints import train_job

    return int(knob_value(train_job(goal, arm, steps, base_job), STEPS_KEY))


def repilot_steps(goal: Goal, design: StageDesign, base_job: dict[str, Any] | None) -> int | None:
    """The stage steps of the one re-pilot after `design` showed no training: twice the pilot's, or None when
    the goal names the run length ("in 8 steps": runs of 16 answer another question), or when the reference
    configuration would still train the same count (the goal studies the steps, so the arm's own value
    overrides the stage's, or fixes them): the re-pilot would repeat the pilot's runs exactly."""
    if goal.steps:
        return None
    doubled = design.steps * 2
    ref = design.arms[0]
    if _trained_steps(goal, ref, doubled, base_job) == _trained_steps(goal, ref, design.steps, base_job):
        return None
    return doubled


def _reference_is_generous(goal: Goal) -> bool:
    """Whether the reference is the generous end of a range (minimum/maximum over a numeric range): the
    value that should train if any does, so its failing to train speaks for every value."""
    return goal.shape in ("minimum", "maximum") and goal.factor.knob.kind != "choice"


def pilot_others(
    goal: Goal,
    budget: ResearchBudget,
    stages: list[StageDesign],
    base_job: dict[str, Any] | None = None,
) -> StageDesign | None:
    """After a pilot of the reference that showed no training: the first grid's other values on the same
    pilot seeds at the same steps, or None when the reference is the generous end of a range (it speaks
    for every value) or every value was piloted at these steps. Its runs are the grid's: `pool_seeds`
    and `first_stage` keep them."""
    last = stages[-1]
    if _reference_is_generous(goal):
        return None
    _x, level = reference_arm(goal, budget, base_job)
    piloted = {(a.level, a.x) for st in stages if st.kind == "calibration" and st.steps == last.steps for a in st.arms}
    xs = [x for x in grid(goal.factor, budget.grid_points) if (level, x) not in piloted]
    if not xs:
        return None
    seeds = list(range(budget.pilot_seeds))
    ref = ", ".join(arm_label(goal, a.x, a.level) for a in last.arms)
    labels = ", ".join(arm_label(goal, x, level) for x in xs)
    index = len(stages) + 1
    trains = arm_steps(goal, xs[0], level, last.steps)
    return StageDesign(
        index=index,
        kind="calibration",
        purpose=(
            f"Stage {index}, calibration of the other values: {labels} for {len(seeds)} seeds, "
            f"{steps_per_run(goal, last.steps)}, on the pilot's seeds and steps."
        ),
        hypothesis=(
            f"Training {goal.task} is visible within {trains} steps for some value the question compares, "
            f"though the reference configuration {ref} did not show it."
        ),
        arms=[Arm(x=x, level=level, seeds=seeds, why="calibration (other values)") for x in xs],
        steps=last.steps,
        rationale=[
            f"The reference configuration {ref} did not show training; the question compares it with "
            f"{labels}, which may train where it does not. Their runs join the grid (none is repeated).",
        ],
    )


def recalibration(
    goal: Goal, budget: ResearchBudget, stages: list[StageDesign], base_job: dict[str, Any] | None = None
) -> StageDesign | None:
    """The one calibration after a pilot that showed no training: the other values (`pilot_others`) when
    the reference does not speak for them, else the reference with twice the steps (`repilot_steps`), else
    None (stop with advice)."""
    others = pilot_others(goal, budget, stages, base_job)
    if others is not None:
        return others
    steps = repilot_steps(goal, stages[-1], base_job)
    if steps is None:
        return None
    return calibration_stage(goal, budget, index=len(stages) + 1, steps=steps, base_job=base_job)


def _steps_advice(goal: Goal, budget: ResearchBudget, base_job: dict[str, Any], cal: Calibration | None) -> str:
    """The "too few steps" cause in words that change something: `--steps` when the stage's steps are what
    the runs train, else what sets them (the studied values, or the goal's fixed count)."""
    steps = cal.steps if cal else budget.steps
    plain = f"{steps} steps may be too few: try --steps {steps * 2} or more"
    x, level = reference_arm(goal, budget, base_job)
    ref = Arm(x=x, level=level, seeds=[0], why="reference")
    try:
        trained = _trained_steps(goal, ref, steps, base_job)
        if trained != _trained_steps(goal, ref, steps * 2, base_job) and not goal.steps:
            return plain
    except ValueError:  # a job the engine refuses: the stage's steps are all there is to say
        trained = steps
        if not goal.steps:
            return plain
    label = arm_label(goal, x, level)
    if goal.steps and trained == steps:
        return (
            f"{trained} steps may be too few, and the goal names them (\"in {goal.steps} steps\"): ask with more "
            f"steps (e.g. {trained * 2})"
        )
    if STEPS_KEY in (goal.factor.key, goal.secondary.key if goal.secondary else None):
        return (
            f"{trained} steps (the reference configuration {label}) may be too few, and more steps per stage cannot "
            f"change it because each run trains its arm's own count: ask about larger step counts (e.g. "
            f"{trained * 2} or {trained * 4})"
        )
    return (
        f"{trained} steps may be too few, and the goal fixes them for every run: ask with more steps "
        f"(e.g. {trained * 2})"
    )


def no_training_advice(
    goal: Goal, budget: ResearchBudget, base_job: dict[str, Any], cal: Calibration | None
) -> str:
    """Why training is probably not visible, and what to change, in words a researcher can act on."""
    model = get_dotted(base_job, "swarm.model.name", "smollm2-135m")
    lr = get_dotted(base_job, "swarm.training.lr", None)
    causes = []
    if model == "tiny":
        causes.append(
            "the model is `tiny`, a random-weight test fixture that cannot learn a task; use --model smollm2-135m"
        )
    if cal is not None and cal.runs and cal.untrained <= 0.0:
        causes.append(
            f"the untrained model scores {fmt(cal.untrained)} on the held-out set, so there is no partial skill to reinforce "
            "(GRPO needs some correct samples per group)"
        )
    causes.append(_steps_advice(goal, budget, base_job, cal))
    if lr is not None:
        causes.append(
            f"the learning rate {fmt(lr)} may be too small (SmolLM2 learns arithmetic at 1e-5 to 2e-5)"
        )
    causes.append("more episodes per step (swarm.pool.batch_size or group_size) make each update less noisy")
    seen = f" The calibration measured {cal.gains_text()}." if cal and cal.runs else ""
    return (
        f"Training is not visible at this budget, so no arm can be compared.{seen} Likely causes: "
        + "; ".join(causes)
        + "."
    )
