"""`a3r plan "<goal>"`: the question as understood, the calibration and first-stage designs, an ETA, and
whether the budget can answer at all, without running anything. Under the calibration, when its reference
does not speak for the other values (compare and best questions), the plan says which values the leader
pilots on the same seeds and steps if the reference shows no training (`if_no_training`).

The budget can answer when what the campaign will run fits in its runs (`max_runs`) and, by the cost
model, in its wall time (`total_wall_s`): the calibration, the first comparison (stage 1) and, with a
confirmation (the default), the confirmation's fresh seeds on the arms the answer rests on. The
confirmation is counted at the seeds it would plan for 80% power against `PRIOR_EFFECT_SD` (the calibrated
effect is only known after the calibration), capped by the runs left. The plan states the power those
seeds buy and, below 80%, the budget (runs and wall time) that would reach it. When the first stages do
not fit, the plan shows the design the goal needs (the run limit lifted) and the budget that holds it.

The ETA comes from the measured cost model in `a3r.leader.costs`. A campaign re-estimates from its own
calibration runs before the grid (the report shows estimated against actual); these priors only size the
plan before anything ran, and say so. The stages are priced in order (`stage_schedules`): a run pays the
step-0 evaluation only when no earlier stage, and no run that stored its entry before it started, evaluated
its key (`a3r.leader.costs.schedule_runs`); the confirmation reruns arms the grid ran, so it reuses theirs. Models without a prior get none: the plan then shows no ETA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from a3r.leader.calibration import answer_arms, calibration_stage, pilot_others
from a3r.leader.costs import PricedRun, Schedule, price_run, runs_within, schedule_runs, schedule_seconds
from a3r.leader.design import BudgetError, ResearchBudget, StageDesign, arm_label, first_stage, steps_per_run
from a3r.leader.goals import Goal
from a3r.leader.knobs import get_dotted
from a3r.leader.power import TARGET_POWER, power_at
from a3r.report.data import question_of

__all__ = [
    "PRIOR_EFFECT_SD",
    "CampaignPlan",
    "ConfirmationPlan",
    "if_no_training",
    "plan_campaign",
    "stage_prior_s",
    "stage_runs",
    "stage_schedules",
]

# The effect the plan sizes the confirmation for, in seed sds, before the calibration measures the real
# one: the committed SmolLM2 arithmetic calibration found an effect of 0.164 (half the reference gain)
# against a seed sd of 0.085, 1.9 sd; 1.5 leaves room for the 80% upper bound the campaign plans sigma at.
PRIOR_EFFECT_SD = 1.5


@dataclass(frozen=True)
class ConfirmationPlan:
    """The confirmation as the plan counts it: `arms` (all levels) x `seeds` fresh seeds, what that buys
    against `PRIOR_EFFECT_SD`, and the seeds per arm that reach 80%."""

    arms: int
    seeds: int  # fresh seeds per arm the plan counts: those for 80% power, capped by the runs left
    needed: int  # seeds per arm for 80% power against PRIOR_EFFECT_SD (at least min_seeds)
    power: float  # at `seeds` (0 below min_seeds: no label, no answer)
    run_s: float | None  # prior seconds of one confirmation run (the first comparison's mean, step-0 reused)

    @property
    def runs(self) -> int:
        return self.arms * self.seeds


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
    confirmation: ConfirmationPlan | None = None  # None without a confirmation stage
    threads: int | None = None  # threads per slot the runs are priced at (None: a slot owns the host)
    stage_eval0: list[int | None] = field(default_factory=list)  # per stage: runs that pay the step-0 evaluation
    if_no_training: str | None = None  # the other-values pilot the calibration runs if the reference does not train

    @property
    def runs(self) -> int:
        """Runs the campaign is planned to take: the stages shown plus the confirmation."""
        return sum(s.n_runs for s in self.stages) + (self.confirmation.runs if self.confirmation else 0)

    @property
    def confirmation_eta_s(self) -> float:
        c = self.confirmation
        return 0.0 if c is None or c.run_s is None else schedule_seconds([c.run_s] * c.runs, self.slots)

    @property
    def eta_s(self) -> float | None:
        """Estimated wall seconds of every planned stage, the confirmation included."""
        if any(e is None for e in self.stage_eta_s) or (
            self.confirmation and self.confirmation.run_s is None
        ):
            return None
        return sum(self.stage_eta_s) + self.confirmation_eta_s

    @property
    def can_answer(self) -> bool:
        """What the campaign will run (calibration, first comparison, confirmation) fits in the budget's runs
        and (estimated) wall time."""
        return not self.shortfall

    def _what(self) -> str:
        c = self.confirmation
        if c is None:
            return "the calibration and the first comparison"
        return f"the calibration, the first comparison and the confirmation ({c.arms} arm(s) x {c.seeds} fresh seed(s))"

    def verdict(self) -> str:
        """Whether the budget can answer, in one or two sentences a researcher can act on."""
        eta = f", about {self.eta_s / 60:.0f} min by the cost model" if self.eta_s is not None else ""
        if self.can_answer:
            return (
                f"The budget can answer: {self._what()} take {self.runs} run(s){eta}, "
                f"within max_runs {self.budget.max_runs}"
                + (f" and total_wall_s {self.budget.total_wall_s:g}" if self.budget.total_wall_s else "")
                + (
                    f", but with {100 * self.confirmation.power:.0f}% power (below {TARGET_POWER:.0%}: see the power line)."
                    if self.confirmation is not None and self.confirmation.power < TARGET_POWER
                    else "."
                )
            )
        more = ",".join(f"{k}={v}" for k, v in self.needed.items())
        return (
            f"The budget cannot answer: {'; '.join(self.shortfall)}. {self._what()[0].upper()}{self._what()[1:]} "
            f"take {self.runs} run(s){eta}: run with --budget {more} (or name fewer values or seeds)."
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
                    "eval0_runs": p,  # runs priced with the step-0 evaluation (the rest reuse a cached one)
                }
                for s, e, p in zip(self.stages, self.stage_eta_s, self.stage_eval0 or [None] * len(self.stages), strict=True)
            ],
            "if_no_training": self.if_no_training,
            "power": self.power_line(),
            "eta_s": self.eta_s,
            "slots": self.slots,
            "threads": self.threads,
            "can_answer": self.can_answer,
            "verdict": self.verdict(),
            "needed_budget": self.needed,
            "eta_note": "prior estimate before any run (measured costs on a 2-core CPU); later stages are sized "
            "from the calibration's measurements",
            "budget": self.budget.model_dump(mode="json"),
        }

    def power_line(self) -> str:
        """What power the budget buys, before anything is measured: against `PRIOR_EFFECT_SD` (the calibration
        measures sigma and the effect and re-sizes the confirmation), with, below 80%, the budget that would
        reach it."""
        b, c = self.budget, self.confirmation
        if c is None:
            return (
                f"Power: the grid is sized from the calibration's sigma (80% upper bound) for 80% power; at most "
                f"{b.max_seeds} seeds per arm."
            )
        head = (
            f"Power: the confirmation gets {c.arms} arm(s) x {c.seeds} fresh seed(s): "
            f"{100 * c.power:.0f}% power against an effect of {PRIOR_EFFECT_SD:g} seed sd (a prior: the calibration "
            f"measures the effect and sigma, plans sigma at its 80% upper bound and re-sizes the confirmation)"
        )
        if c.power >= TARGET_POWER:
            return head + "."
        runs = sum(s.n_runs for s in self.stages) + c.arms * c.needed
        parts = ([f"max_runs={runs}"] if runs > b.max_runs else []) + (
            [f"max_seeds={c.needed}"] if c.needed > b.max_seeds else []
        )
        wall = ""
        if self.eta_s is not None and c.run_s is not None:
            total = sum(self.stage_eta_s) + schedule_seconds([c.run_s] * (c.arms * c.needed), self.slots)
            wall = f", about {total / 60:.0f} min by the cost model"
            if b.total_wall_s is not None and total > b.total_wall_s:
                parts.append(f"total_wall_s={math.ceil(total / 60) * 60}")
        return head + (
            f"; below {TARGET_POWER:.0%}. {TARGET_POWER:.0%} needs {c.needed} seed(s) per arm: {runs} run(s) in all"
            f"{wall} (--budget {','.join(parts) or f'max_runs={runs}'})."
        )

    def _slots(self) -> str:
        threads = "" if self.threads is None else f" of {self.threads} thread(s) each"
        return f"{self.slots} slot(s){threads}"

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
        paying = self.stage_eval0 or [None] * len(self.stages)
        for s, e, p in zip(self.stages, self.stage_eta_s, paying, strict=True):
            eta = f"about {e / 60:.1f} min" if e is not None else "no estimate"
            eval0 = "" if p is None else f"; {p} pay(s) the step-0 evaluation, {s.n_runs - p} reuse it"
            lines.append(f"{s.purpose} [{s.n_runs} run(s), {eta}{eval0}]")
            for a in s.arms:
                lines.append(
                    f"    {a.x}{'' if a.level is None else f' @ {a.level}'}: seeds {a.seeds} ({a.why})"
                )
            if s.kind == "calibration" and self.if_no_training:
                lines.append(f"  {self.if_no_training}")
        lines.append(self.power_line())
        if self.eta_s is not None:
            lines.append(
                f"ETA of these stages and the confirmation on {self._slots()}: about {self.eta_s / 60:.1f} min (prior estimate, "
                "evaluations and checkpoints included; the step-0 evaluation only for the runs that find no cached "
                "one, none in the confirmation; the grid is re-sized from the calibration's measured cost and noise)."
            )
        lines.append(self.verdict())
        return "\n".join(lines)


def if_no_training(
    goal: Goal, budget: ResearchBudget, stages: list[StageDesign], base_job: dict[str, Any]
) -> str | None:
    """What the campaign does if the calibration's reference shows no training, when that is the pilot of
    the first grid's other values (`a3r.leader.calibration.pilot_others`: the reference is not the generous
    end of a range, as in compare and best questions, and the grid has values it did not pilot); None
    otherwise. It is the second and last calibration (`MAX_CALIBRATIONS`), run only if the wall budget
    holds it."""
    cals = [s for s in stages if s.kind == "calibration"]
    others = pilot_others(goal, budget, cals, base_job) if cals else None
    if others is None:
        return None
    ref = ", ".join(arm_label(goal, a.x, a.level) for a in cals[-1].arms)
    values = ", ".join(arm_label(goal, a.x, a.level) for a in others.arms)
    return (
        f"If the reference configuration {ref} shows no training, the calibration pilots the first grid's other "
        f"value(s) {values} on the same seeds {others.arms[0].seeds} ({steps_per_run(goal, others.steps)}) if "
        "the wall budget holds them: their runs are the grid's, sigma is pooled over every piloted arm, and if "
        "none shows training the campaign stops with advice."
    )


def plan_confirmation(
    goal: Goal,
    budget: ResearchBudget,
    stages: list[StageDesign],
    stage_eta_s: list[float | None],
    slots: int,
    run_s: float | None,
) -> ConfirmationPlan | None:
    """The confirmation the campaign would run after `stages`: the seeds per arm for 80% power against
    `PRIOR_EFFECT_SD`, capped by max_seeds, the runs left and (by the cost model) the wall time left, as
    the campaign caps it; None without a confirmation. A run costs `run_s`: the first comparison's average."""
    if not budget.confirms:
        return None
    per_level = answer_arms(goal, budget)
    arms = per_level * (1 if goal.secondary is None else budget.secondary_levels)

    def power(n: int) -> float:
        ok = n >= budget.min_seeds
        return power_at(goal.shape, per_level, n, 1.0, PRIOR_EFFECT_SD, budget.alpha, 0.0) if ok else 0.0

    needed = budget.min_seeds
    while needed < 64 and power(needed) < TARGET_POWER:
        needed += 1
    seeds = min(needed, budget.max_seeds, max(0, budget.max_runs - sum(s.n_runs for s in stages)) // arms)
    if budget.total_wall_s is not None and run_s and all(e is not None for e in stage_eta_s):
        wall_left = budget.total_wall_s - sum(stage_eta_s)
        seeds = min(seeds, runs_within(wall_left, run_s, slots) // arms)
    return ConfirmationPlan(arms, seeds, needed, power(seeds), run_s)


def stage_runs(
    goal: Goal, design: StageDesign, base_job: dict[str, Any], threads: int | None = None
) -> list[PricedRun] | None:
    """A stage's runs as the cost model prices them, in the order they are submitted (arm by arm, seed by
    seed), at `threads` threads per slot (None without a prior)."""
    from a3r.leader.blueprints import train_job

    per_arm = [price_run(train_job(goal, a, design.steps, base_job), design.steps, threads) for a in design.arms]
    if any(x is None for x in per_arm):
        return None
    return [x for x, a in zip(per_arm, design.arms, strict=True) for _seed in a.seeds]


def stage_schedules(
    goal: Goal, designs: list[StageDesign], base_job: dict[str, Any], slots: int = 1, threads: int | None = None
) -> list[Schedule | None]:
    """Each of `designs`, run one after another on `slots` slots, scheduled by the cost model: a stage
    reuses the step-0 evaluations of the stages before it (`schedule_runs`). None for a stage without a
    prior; the stages after it are priced as if it evaluated nothing."""
    out: list[Schedule | None] = []
    evaluated: frozenset[str] = frozenset()
    for design in designs:
        runs = stage_runs(goal, design, base_job, threads)
        sched = None if runs is None else schedule_runs(runs, slots, evaluated)
        evaluated = evaluated if sched is None else sched.evaluated
        out.append(sched)
    return out


def stage_prior_s(
    goal: Goal,
    design: StageDesign,
    base_job: dict[str, Any],
    slots: int = 1,
    threads: int | None = None,
    before: list[StageDesign] | None = None,
) -> float | None:
    """Prior wall seconds of a stage from the cost model: its runs, priced at `threads` threads, scheduled
    over `slots` slots after the stages `before` it (whose step-0 evaluations it reuses); None without a
    prior."""
    sched = stage_schedules(goal, [*(before or []), design], base_job, slots, threads)[-1]
    return None if sched is None else sched.wall_s


def plan_campaign(
    goal: Goal, budget: ResearchBudget, base_job: dict[str, Any], *, slots: int = 1, threads: int | None = None
) -> CampaignPlan:
    """The stages a campaign starts with (the calibration unless turned off, and the first grid as the
    budget sizes it before any measurement), and whether they fit the budget, on `slots` slots of `threads`
    threads each. A first grid the runs cannot hold is shown as the goal needs it (the run limit lifted),
    with the budget that would hold it."""
    stages: list[StageDesign] = []
    if budget.calibrate:
        stages.append(calibration_stage(goal, budget, base_job=base_job))
    shortfall: list[str] = []
    try:
        first = first_stage(goal, budget, prior=list(stages))
        stages.extend([first] if first is not None else [])  # a goal of one value: the pilot is the grid
    except BudgetError as e:
        shortfall.append(
            f"the first comparison needs {e.needed} run(s) and max_runs {budget.max_runs} leaves {e.left}"
        )
        lifted = budget.model_copy(update={"max_runs": sum(s.n_runs for s in stages) + e.needed})
        stages.append(first_stage(goal, lifted, prior=list(stages)))
    scheds = stage_schedules(goal, stages, base_job, slots, threads)
    etas = [None if sc is None else sc.wall_s for sc in scheds]
    # the confirmation reruns arms of the first comparison: their step-0 evaluations are cached by then
    last = [r.reused_s if r.key is not None else r.seconds for r in stage_runs(goal, stages[-1], base_job, threads) or []]
    model = str(get_dotted(base_job, "swarm.model.name", ""))
    if goal.fixed.get("swarm.model.name"):
        model = str(goal.fixed["swarm.model.name"])
    confirmation = plan_confirmation(goal, budget, stages, etas, slots, sum(last) / len(last) if last else None)
    plan = CampaignPlan(
        goal,
        budget,
        model,
        stages,
        etas,
        slots,
        shortfall=shortfall,
        confirmation=confirmation,
        threads=threads,
        stage_eval0=[None if sc is None else sum(sc.pays_eval0) for sc in scheds],
        if_no_training=if_no_training(goal, budget, stages, base_job),
    )
    needed: dict[str, Any] = {}
    if confirmation is not None and confirmation.seeds < budget.min_seeds:
        # no confirmation with labels fits after the first stages: count it at min_seeds per arm
        floor = confirmation.arms * budget.min_seeds
        shortfall.append(
            f"the confirmation needs at least {floor} run(s) ({confirmation.arms} arm(s) x min_seeds={budget.min_seeds} "
            "fresh seeds), which the budget cannot hold after the first stages"
        )
        plan.confirmation = confirmation = replace(confirmation, seeds=budget.min_seeds, power=0.0)
    if plan.runs > budget.max_runs:
        needed["max_runs"] = plan.runs
    eta = plan.eta_s
    if budget.total_wall_s is not None and eta is not None and eta > budget.total_wall_s:
        shortfall.append(
            f"by the cost model they take about {eta / 60:.0f} min and total_wall_s is {budget.total_wall_s:g} s"
        )
        needed["total_wall_s"] = math.ceil(eta / 60) * 60
    plan.needed = needed if shortfall else {}
    return plan
