"""The calibration (pilot) stage: is training visible at this budget, how noisy is the score, what does a
run cost, and how many seeds does the question need?

Before any grid, the leader runs the *reference configuration* (the generous end of the studied range for
minimum/maximum questions, the middle value otherwise) for `pilot_seeds` seeds and measures, from the same
held-out score the analysis uses:
- the untrained level (step 0) and the gain over it, with a 95% t interval;
- sigma, the seed-to-seed sd of the gain (never below the evaluation set's binomial noise);
- seconds per run.
Training is *visible* when the gain interval clears 0. Then the grid is sized: seeds per arm for 80% power
against the smallest effect worth reporting (`EFFECT_FRACTION` of the reference gain, or the goal's own
criterion fraction), and no more runs than the remaining wall budget holds. When training is not visible
the leader re-pilots once with twice the steps if the budget holds it, and otherwise stops with advice
(`no_training_advice`) instead of comparing arms that cannot differ.

Pure functions over run records and budgets; the graph calls them.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a3r.analysis import fmt, look_level, seeds_for_best, seeds_for_effect, t_interval
from a3r.analysis.stats import resolution_sd
from a3r.leader.design import Arm, ResearchBudget, StageDesign, arm_label, grid
from a3r.leader.goals import Goal
from a3r.leader.knobs import get_dotted

__all__ = [
    "EFFECT_FRACTION",
    "Calibration",
    "calibration_stage",
    "measure",
    "no_training_advice",
    "pool_seeds",
    "reference_arm",
    "size_budget",
]

# The smallest effect a comparison is sized to detect: half the reference configuration's gain.
EFFECT_FRACTION = 0.5
MAX_CALIBRATIONS = 2  # the first pilot and at most one re-pilot with more steps


class Calibration(BaseModel):
    """What the pilot measured and what the leader concluded from it (plain data: it lives in the state)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: int = Field(description="Stage index of the calibration runs.")
    label: str = Field(description="Reference arm.")
    steps: int
    runs: int = Field(description="Calibration runs that produced a score.")
    untrained: float = Field(description="Mean step-0 score.")
    gain: float = Field(description="Mean gain over the untrained level.")
    gain_lo: float | None = None
    gain_hi: float | None = None
    sigma: float = Field(description="Seed-to-seed sd of the gain, floored by the evaluation noise.")
    run_s: float = Field(description="Mean wall seconds per calibration run.")
    visible: bool = Field(description="The gain's 95% interval lies above 0.")
    effect: float = Field(0.0, description="Effect the grid is sized to detect.")
    seeds_per_arm: int = Field(0, description="Seeds per arm the power calculation asks for (before caps).")
    note: str = ""


def reference_arm(goal: Goal, budget: ResearchBudget) -> tuple[Any, Any]:
    """(x, level) of the reference configuration: fixed by the question, never chosen from data."""
    xs = grid(goal.factor, budget.grid_points)
    if goal.shape == "minimum":
        x = xs[-1] if goal.factor.knob.kind != "choice" else xs[0]
    elif goal.shape == "maximum":
        x = xs[0]
    else:
        x = xs[(len(xs) - 1) // 2]
    level = None if goal.secondary is None else grid(goal.secondary, budget.secondary_levels)[0]
    return x, level


def calibration_stage(
    goal: Goal, budget: ResearchBudget, index: int = 1, steps: int | None = None
) -> StageDesign:
    """The pilot: the reference configuration for `pilot_seeds` seeds at `steps` (default the budget's)."""
    x, level = reference_arm(goal, budget)
    steps = steps or budget.steps
    label = arm_label(goal, x, level)
    first = index == 1
    return StageDesign(
        index=index,
        kind="calibration",
        purpose=(
            f"Stage {index}, calibration{'' if first else ' again with more steps'}: the reference configuration "
            f"{label} for {budget.pilot_seeds} seeds, {steps} steps each, to measure the untrained level, the gain, "
            "its noise and the cost of a run before sizing the grid."
        ),
        hypothesis=(
            f"Training {goal.task} is visible within {steps} steps: the reference configuration's gain in "
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
    """The calibration from its runs: `scores` = (step-0 score, final score) per scored run, `wall_s` the
    wall seconds of every finished run."""
    arm = design.arms[0]
    label = arm_label(goal, arm.x, arm.level)
    run_s = statistics.fmean(wall_s) if wall_s else 0.0
    if not scores:
        return Calibration(
            stage=design.index,
            label=label,
            steps=design.steps,
            runs=0,
            untrained=math.nan,
            gain=math.nan,
            sigma=math.nan,
            run_s=run_s,
            visible=False,
            note="no calibration run produced a score",
        )
    gains = [end - start for start, end in scores]
    untrained = statistics.fmean(s for s, _e in scores)
    floor = resolution_sd(eval_items) if eval_items else 0.0
    iv = t_interval(gains, floor_sd=floor)
    sigma = max(statistics.stdev(gains) if len(gains) > 1 else 0.0, floor)
    visible = iv.defined and iv.lo > 0
    cal = Calibration(
        stage=design.index,
        label=label,
        steps=design.steps,
        runs=len(scores),
        untrained=untrained,
        gain=iv.mean,
        gain_lo=iv.lo if iv.defined else None,
        gain_hi=iv.hi if iv.defined else None,
        sigma=sigma,
        run_s=run_s,
        visible=visible,
    )
    if not visible:
        return cal
    relative = (
        goal.shape in ("minimum", "maximum")
        and goal.criterion.kind == "relative"
        and goal.criterion.value > 0
    )
    fraction = goal.criterion.value if relative else EFFECT_FRACTION
    effect = max(fraction * iv.mean, 1e-9)
    if sigma <= 0:
        n = budget.min_seeds
    elif goal.shape == "best":
        n = seeds_for_best(
            sigma, effect, len(grid(goal.factor, budget.grid_points)), alpha=budget.alpha, looks=budget.looks
        )
    else:
        n = seeds_for_effect(sigma, effect, level=look_level(budget.alpha, budget.looks))
    return cal.model_copy(update={"effect": effect, "seeds_per_arm": n})


def size_budget(
    goal: Goal, budget: ResearchBudget, cal: Calibration, runs_done: int, wall_spent_s: float
) -> tuple[ResearchBudget, list[str]]:
    """The budget the grid runs under, and why: calibrated steps, seeds per arm within [min_seeds,
    max_seeds], and no more runs than the remaining wall budget holds at the measured cost per run."""
    why = []
    seeds = min(max(cal.seeds_per_arm, budget.min_seeds), budget.max_seeds)
    if cal.seeds_per_arm > budget.max_seeds:
        why.append(
            f"The power calculation asks for {cal.seeds_per_arm} seeds per arm (sigma {fmt(cal.sigma)}, effect "
            f"{fmt(cal.effect)}); capped at max_seeds {budget.max_seeds}, so small effects may stay uncertain."
        )
    else:
        why.append(
            f"{seeds} seeds per arm: enough for 80% power against an effect of {fmt(cal.effect)} with sigma "
            f"{fmt(cal.sigma)} (the power calculation asks for {cal.seeds_per_arm}; at least {budget.min_seeds} for a label)."
        )
    max_runs = budget.max_runs
    if budget.total_wall_s is not None and cal.run_s > 0:
        left = max(0, math.floor((budget.total_wall_s - wall_spent_s) / cal.run_s))
        if runs_done + left < max_runs:
            max_runs = runs_done + left
            why.append(
                f"The wall budget ({fmt(budget.total_wall_s)} s, {fmt(wall_spent_s)} s spent) holds about {left} more "
                f"run(s) at {fmt(cal.run_s)} s each."
            )
    upd = {"seeds": seeds, "steps": cal.steps, "max_runs": max(max_runs, runs_done + 1)}
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


def no_training_advice(
    goal: Goal, budget: ResearchBudget, base_job: dict[str, Any], cal: Calibration | None
) -> str:
    """Why training is probably not visible, and what to change, in words a researcher can act on."""
    model = get_dotted(base_job, "swarm.model.name", "smollm2-135m")
    lr = get_dotted(base_job, "swarm.training.lr", None)
    steps = cal.steps if cal else budget.steps
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
    causes.append(f"{steps} steps may be too few: try --steps {steps * 2} or more")
    if lr is not None:
        causes.append(
            f"the learning rate {fmt(lr)} may be too small (SmolLM2 learns arithmetic at 1.5e-5 to 2e-5)"
        )
    causes.append("more episodes per step (swarm.pool.batch_size or group_size) make each update less noisy")
    seen = (
        f" The calibration measured a gain of {fmt(cal.gain)} [{fmt(cal.gain_lo)}, {fmt(cal.gain_hi)}]."
        if cal and cal.runs
        else ""
    )
    return (
        f"Training is not visible at this budget, so no arm can be compared.{seen} Likely causes: "
        + "; ".join(causes)
        + "."
    )
