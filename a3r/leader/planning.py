"""`a3r plan "<goal>"`: the question as understood, the calibration and first-stage designs, an ETA, and
whether the budget can answer at all, without running anything.

The budget can answer when the calibration and the first comparison (stage 1) fit in its runs
(`max_runs`) and, by the cost model, in its wall time (`total_wall_s`). When they do not, the plan shows
the design the goal needs (sized with the run limit lifted) and the budget that holds it, as a command.

The ETA comes from the measured cost model in `a3r.leader.costs`. A campaign re-estimates from its own
calibration runs before the grid (the report shows estimated against actual); these priors only size the
plan before anything ran, and say so. Models without a prior get none: the plan then shows no ETA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from a3r.leader.calibration import calibration_stage
from a3r.leader.costs import run_seconds
from a3r.leader.design import BudgetError, ResearchBudget, StageDesign, first_stage, grid
from a3r.leader.goals import Goal
from a3r.leader.knobs import get_dotted
from a3r.leader.power import TARGET_POWER, power_at
from a3r.report.data import question_of

__all__ = ["CampaignPlan", "plan_campaign", "stage_prior_s"]


@dataclass
class CampaignPlan:
    goal: Goal
    budget: ResearchBudget
    model: str
    stages: list[StageDesign]
    stage_eta_s: list[float | None]
    slots: int
    # the budget that holds the calibration and the first comparison ({} when this one does), and why not
    needed: dict[str, Any] = field(default_factory=dict)
    shortfall: list[str] = field(default_factory=list)

    @property
    def eta_s(self) -> float | None:
        return None if any(e is None for e in self.stage_eta_s) else sum(self.stage_eta_s)

    @property
    def can_answer(self) -> bool:
        """The calibration and the first comparison fit in the budget's runs and (estimated) wall time."""
        return not self.shortfall

    def verdict(self) -> str:
        """Whether the budget can answer, in one or two sentences a researcher can act on."""
        runs = sum(s.n_runs for s in self.stages)
        eta = f", about {self.eta_s / 60:.0f} min by the cost model" if self.eta_s is not None else ""
        if self.can_answer:
            return (
                f"The budget can answer: the calibration and the first comparison take {runs} run(s){eta}, "
                f"within max_runs {self.budget.max_runs}"
                + (f" and total_wall_s {self.budget.total_wall_s:g}" if self.budget.total_wall_s else "")
                + "."
            )
        more = ",".join(f"{k}={v}" for k, v in self.needed.items())
        return (
            f"The budget cannot answer: {'; '.join(self.shortfall)}. The calibration and the first comparison "
            f"take {runs} run(s){eta}: run with --budget {more} (or name fewer values or seeds)."
        )

    def as_json(self) -> dict[str, Any]:
        q = question_of(self.goal, self.budget)
        return {
            "question": {
                "text": self.goal.text,
                "understood": self.goal.describe(),
                "shape": self.goal.shape,
                "variable": self.goal.factor.key,
                "values": self.goal.factor.values,
                "range": None if self.goal.factor.values else [self.goal.factor.low, self.goal.factor.high],
                "secondary": self.goal.secondary.key if self.goal.secondary else None,
                "task": self.goal.task,
                "model": self.model,
                "score": f"{self.goal.statistic} {self.goal.metric}",
                "criterion": self.goal.criterion.describe(self.goal.metric),
                "fixed": self.goal.fixed,
                "assumptions": self.goal.assumptions,
            },
            "statistics": {
                "alpha": self.budget.alpha,
                "looks": self.budget.looks,
                "level": q.level,
                "min_seeds": self.budget.min_seeds,
            },
            "stages": [
                {
                    "index": s.index,
                    "kind": s.kind,
                    "purpose": s.purpose,
                    "runs": s.n_runs,
                    "steps": s.steps,
                    "arms": [a.model_dump(mode="json") for a in s.arms],
                    "eta_s": e,
                }
                for s, e in zip(self.stages, self.stage_eta_s, strict=True)
            ],
            "power": self.power_line(),
            "eta_s": self.eta_s,
            "can_answer": self.can_answer,
            "verdict": self.verdict(),
            "needed_budget": self.needed,
            "eta_note": "prior estimate before any run (measured costs on a 2-core CPU); later stages are sized "
            "from the calibration's measurements",
            "budget": self.budget.model_dump(mode="json"),
        }

    def confirmation_room(self) -> tuple[int, int]:
        """(arms the answer compares, fresh seeds per arm the runs left after these stages hold)."""
        shape = self.goal.shape
        k = len(grid(self.goal.factor, self.budget.grid_points))
        arms = min(3, k)
        if shape in ("compare", "effect") and k == 2:
            arms = 2
        left = self.budget.max_runs - sum(s.n_runs for s in self.stages)
        return arms, min(self.budget.max_seeds, left // arms)

    def power_line(self) -> str:
        """What power the budget buys, before anything is measured (sigma and the effect come from the
        calibration; power depends only on their ratio, so it is stated as the effect it detects)."""
        b = self.budget
        if not b.confirms:
            return (
                f"Power: the grid is sized from the calibration's sigma (80% upper bound) for 80% power; at most "
                f"{b.max_seeds} seeds per arm."
            )
        arms, seeds = self.confirmation_room()
        if seeds < b.min_seeds:
            need = sum(s.n_runs for s in self.stages) + arms * b.min_seeds
            return (
                f"Power: below 80% for any effect: after these stages the budget holds {seeds} fresh seed(s) per arm for "
                f"the confirmation of {arms} arm(s), fewer than min_seeds={b.min_seeds}; --budget max_runs={need} "
                "at the least."
            )
        d = detectable_effect(self.goal.shape, arms, seeds, b.alpha)
        return (
            f"Power: the budget leaves room for a confirmation of {arms} arm(s) x {seeds} fresh seed(s); that detects an "
            f"effect of {d:.2g} seed sd with 80% power (with sigma known; the calibration measures sigma and the effect "
            "and re-sizes it, planning sigma at its 80% upper bound, and says if the budget falls short)."
        )

    def render(self) -> str:
        g = self.goal
        lines = [
            f"Question as understood: {g.describe()}",
            f"  shape {g.shape}; variable {g.factor.describe()}"
            + (f"; secondary {g.secondary.describe()}" if g.secondary else ""),
            f"  task {g.task}, model {self.model}; score: {g.statistic} {g.metric}"
            + (f"; criterion: {g.criterion.describe(g.metric)}" if g.shape in ("minimum", "maximum") else ""),
        ]
        lines += [f"  assumption: {a}" for a in g.assumptions]
        if g.fixed:
            lines.append("  fixed: " + ", ".join(f"{k}={v}" for k, v in g.fixed.items()))
        q = question_of(g, self.budget)
        lines.append(
            f"Statistics: t intervals at {100 * q.level:.4g}% per decision (alpha {self.budget.alpha} over "
            f"{self.budget.looks} look(s)); no label below {self.budget.min_seeds} seeds per arm."
        )
        for s, e in zip(self.stages, self.stage_eta_s, strict=True):
            eta = f"about {e / 60:.1f} min" if e is not None else "no estimate"
            lines.append(f"{s.purpose} [{s.n_runs} run(s), {eta}]")
            for a in s.arms:
                lines.append(
                    f"    {a.x}{'' if a.level is None else f' @ {a.level}'}: seeds {a.seeds} ({a.why})"
                )
        lines.append(self.power_line())
        if self.eta_s is not None:
            lines.append(
                f"ETA of these stages on {self.slots} slot(s): about {self.eta_s / 60:.1f} min (prior estimate, "
                "evaluations and checkpoints included; the grid is re-sized from the calibration's measured cost "
                "and noise)."
            )
        lines.append(self.verdict())
        return "\n".join(lines)


def detectable_effect(shape: str, arms: int, seeds: int, alpha: float, *, power: float = TARGET_POWER) -> float:
    """Smallest effect, in units of the seed sd, that `seeds` per arm detect with `power` (bisection on the
    power the analysis rule has; power only depends on effect / sigma)."""
    lo, hi = 0.0, 20.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if power_at(shape, arms, seeds, 1.0, mid, alpha, 0.0) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def stage_prior_s(goal: Goal, design: StageDesign, base_job: dict[str, Any], slots: int = 1) -> float | None:
    """Prior wall seconds of a stage on `slots` slots from the cost model (None without a prior)."""
    from a3r.leader.blueprints import train_job

    per_arm = [run_seconds(train_job(goal, a, design.steps, base_job), design.steps) for a in design.arms]
    if any(x is None for x in per_arm):
        return None
    return sum(x * len(a.seeds) for x, a in zip(per_arm, design.arms, strict=True)) / slots


def plan_campaign(
    goal: Goal, budget: ResearchBudget, base_job: dict[str, Any], *, slots: int = 1
) -> CampaignPlan:
    """The stages a campaign starts with (the calibration unless turned off, and the first grid as the
    budget sizes it before any measurement), and whether they fit the budget. A first grid the runs cannot
    hold is shown as the goal needs it (the run limit lifted), with the budget that would hold it."""
    stages: list[StageDesign] = []
    if budget.calibrate:
        stages.append(calibration_stage(goal, budget, base_job=base_job))
    shortfall: list[str] = []
    try:
        stages.append(first_stage(goal, budget, prior=list(stages)))
    except BudgetError as e:
        shortfall.append(f"the first comparison needs {e.needed} run(s) and max_runs {budget.max_runs} leaves {e.left}")
        lifted = budget.model_copy(update={"max_runs": sum(s.n_runs for s in stages) + e.needed})
        stages.append(first_stage(goal, lifted, prior=list(stages)))
    etas = [stage_prior_s(goal, st, base_job, slots) for st in stages]
    model = str(get_dotted(base_job, "swarm.model.name", ""))
    if goal.fixed.get("swarm.model.name"):
        model = str(goal.fixed["swarm.model.name"])
    plan = CampaignPlan(goal, budget, model, stages, etas, slots, shortfall=shortfall)
    runs = sum(s.n_runs for s in stages)
    needed: dict[str, Any] = {}
    if runs > budget.max_runs:
        needed["max_runs"] = runs
    eta = plan.eta_s
    if budget.total_wall_s is not None and eta is not None and eta > budget.total_wall_s:
        shortfall.append(
            f"by the cost model they take about {eta / 60:.0f} min and total_wall_s is {budget.total_wall_s:g} s"
        )
        needed["total_wall_s"] = math.ceil(eta / 60) * 60
    plan.needed = needed if shortfall else {}
    return plan
