"""Everything a campaign report shows, assembled from the store (via `observe`) and the analysis.

`build_report_data` is the only place report numbers come from: run records read from the store, and
`a3r.analysis.analyse` over them (per stage: the runs of that stage and all earlier ones). LLM prose
enters only through `vet_prose`, which replaces any number that does not appear in the evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from a3r.analysis import Evidence, Question, RunObs, analyse, fmt
from a3r.leader.costs import schedule_seconds
from a3r.leader.design import ResearchBudget, StageDesign, grid, steps_per_run, steps_studied
from a3r.leader.goals import Goal
from a3r.leader.observe import RunRecord
from a3r.leader.power import power_at

__all__ = [
    "ArmRow",
    "ReportData",
    "RunRow",
    "StageView",
    "achieved_power",
    "allowed_numbers",
    "answer_evidence",
    "build_report_data",
    "eval_items_of",
    "question_of",
    "vet_prose",
]

_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w])")


def eval_items_of(base_job: dict[str, Any]) -> int | None:
    """Held-out items per evaluation in the campaign's base job (None when it does not evaluate)."""
    n = base_job.get("eval_size")
    return int(n) if isinstance(n, int) and n > 0 else None


def question_of(goal: Goal, budget: ResearchBudget | None = None, eval_items: int | None = None) -> Question:
    """The analysis view of a goal: its shape, score and criterion, and the budget's error spending
    (looks, seeds before a label). `eval_items` sets the binomial noise floor of held-out accuracy."""
    b = budget or ResearchBudget()
    return Question(
        shape=goal.shape,
        name=goal.factor.name,
        statistic=goal.statistic,
        metric=goal.metric,
        criterion_kind=goal.criterion.kind,
        criterion_value=goal.criterion.value,
        secondary_name=goal.secondary.name if goal.secondary else None,
        alpha=b.alpha,
        looks=b.looks,
        min_seeds=b.min_seeds,
        eval_items=eval_items if goal.metric == "eval_accuracy" else None,
        pair_seeds=b.pair_seeds,
        values=tuple(grid(goal.factor, b.grid_points)),
    )


def achieved_power(
    goal: Goal,
    budget: ResearchBudget,
    ev: Evidence,
    calibration: list[dict[str, Any]],
    designs: list[StageDesign] | None = None,
) -> dict[str, Any] | None:
    """The power the runs that answer had for the planned effect: the fewest seeds of the arms the answer
    compares (the confirmation's when one ran), at the sigma and effect those seeds were planned with: the
    confirmation's own sizing when one ran (its sigma bound re-measured on the exploration runs), else the
    calibration's. One sigma for the plan and the report, so a confirmation sized for 80% never reads as
    57% because the report priced it with the pilot's bound. None without a calibration that saw training
    (no effect to size for) or without two such arms."""
    cal = calibration[-1] if calibration else None
    if not cal or not cal.get("visible") or not cal.get("sigma_plan") or not cal.get("effect"):
        return None
    confirm = next((d for d in designs or [] if d.kind == "confirm" and d.planned_sigma), None)
    sigma, effect = (confirm.planned_sigma, confirm.planned_effect) if confirm else (cal["sigma_plan"], cal["effect"])
    arms = [a for le in ev.levels for a in le.arms]
    per_level = max((len(le.arms) for le in ev.levels), default=0)
    if per_level < 2 or min(a.n for a in arms) < 2:
        return None
    n = min(a.n for a in arms)
    floor = ev.question.floor_sd(0.0)
    alpha = budget.alpha / ev.question.looks
    p = power_at(goal.shape, per_level, n, sigma, effect, alpha, floor)
    needed = confirm.planned_needed if confirm else cal.get("seeds_per_arm")
    return {"power": p, "seeds": n, "arms": per_level, "needed": needed, "effect": effect, "sigma": sigma}


def answer_evidence(
    q: Question, obs: list[RunObs], designs: list[StageDesign], budget: ResearchBudget
) -> Evidence:
    """The evidence the campaign answers from after the stages `designs` (the runs `obs` at the current
    step count): the confirmation's runs alone when one ran; provisional (nothing conclusive) while a
    campaign that needs a confirmation has not run one."""
    confirm = next((d.index for d in designs if d.kind == "confirm"), None) if budget.confirms else None
    # a comparison ran: a research stage, or a calibration that piloted more than the reference
    research = any(d.kind != "calibration" for d in designs) or len({(a.level, a.x) for d in designs for a in d.arms}) > 1
    return analyse(q, obs, confirm_stage=confirm, provisional=budget.confirms and confirm is None and research)


@dataclass
class ArmRow:
    label: str
    x: Any
    level: Any
    n: int
    mean: float
    lo: float | None
    hi: float | None
    status: str  # pass/fail/uncertain (threshold shapes), best/tied/dominated, or ""
    run_ids: list[int]
    scores: list[float]
    gain: float = 0.0  # mean gain over the untrained level
    gain_lo: float | None = None
    gain_hi: float | None = None
    trained: bool = False


@dataclass
class RunRow:
    run_id: int
    name: str
    stage: int
    arm: str
    seed: int
    state: str
    attempts: int
    host: str
    config_hash: str
    blueprint_hash: str
    final: float | None
    auc: float | None
    steps: int
    episodes: int
    wall_s: float


@dataclass
class StageView:
    index: int
    design: StageDesign
    run_ids: list[int]
    eta_s: float | None  # estimated wall seconds when the stage was planned
    actual_s: float  # wall seconds its runs took, scheduled over the slots in order (as the ETA)
    arms: list[ArmRow]  # pooled evidence as of this stage, for the arms this stage ran
    verdict: str
    decision: dict[str, Any]  # Decision as data (action, reason, author)
    dropped: dict[str, str]  # arm label -> why it was stopped early
    figure: str = ""  # file name of the stage's learning-curve figure


@dataclass
class ReportData:
    campaign: str
    goal: Goal
    budget: ResearchBudget
    policy: str
    stages: list[StageView]
    evidence: Evidence  # all stages pooled
    final_arms: list[ArmRow]
    runs: list[RunRow]
    failures: list[dict[str, Any]]  # failed/timed-out/stale attempts and what followed
    cancelled: list[RunRow]
    compute: dict[str, Any]
    provenance: dict[str, Any]
    calibration: list[dict[str, Any]] = field(default_factory=list)  # Calibration as data, per pilot
    model: str = ""
    power: dict[str, Any] | None = None  # the power the answering runs actually had (`achieved_power`)
    prose: dict[str, str] = field(default_factory=dict)
    figures: dict[str, str] = field(default_factory=dict)  # role -> file name

    @property
    def steps_studied(self) -> bool:
        """The training steps are a studied variable: each run trains its arm's count, not the budget's."""
        return steps_studied(self.goal)

    @property
    def steps_text(self) -> str:
        """The runs' training steps in words ("20 steps per run", or each run its arm's count)."""
        return steps_per_run(self.goal, self.budget.steps)


def _status(ev: Evidence, label: str, level: Any) -> str:
    """The arm's label in the tables; never more than the answer says: "best" only when the best is
    conclusive (a lead that is not separated, or the only value tested, is not "best")."""
    for le in ev.levels:
        if le.level != level:
            continue
        if le.threshold is not None:
            return le.threshold.status.get(label, "")
        if le.best is not None and le.best.best is not None:
            if le.best.best.label == label:
                return "best" if le.best.conclusive else "leads" if le.best.tied else ""
            if any(a.label == label for a in le.best.tied):
                return "not separated"
            if any(a.label == label for a in le.best.dominated):
                return "worse"
        if le.compare is not None and le.compare.winner is not None:
            return "better" if le.compare.winner.label == label else "worse"
    return ""


def _arm_rows(ev: Evidence, labels: set[str] | None = None) -> list[ArmRow]:
    rows = []
    for le in ev.levels:
        for a in le.arms:
            if labels is not None and a.label not in labels:
                continue
            iv = a.interval.as_dict()
            giv = a.gain_interval.as_dict() if a.gain_interval is not None else {}
            rows.append(
                ArmRow(
                    label=a.label,
                    x=a.x,
                    level=a.level,
                    n=a.n,
                    mean=iv["mean"],
                    lo=iv["lo"],
                    hi=iv["hi"],
                    status=_status(ev, a.label, a.level),
                    run_ids=list(a.run_ids),
                    scores=list(a.scores),
                    gain=giv.get("mean", 0.0),
                    gain_lo=giv.get("lo"),
                    gain_hi=giv.get("hi"),
                    trained=a.trained,
                )
            )
    return rows


def _run_row(r: RunRecord) -> RunRow:
    s = r.obs.score()
    last = r.attempts[-1] if r.attempts else None
    return RunRow(
        run_id=r.obs.run_id,
        name=r.name,
        stage=r.obs.stage,
        arm=r.obs.label,
        seed=r.obs.seed,
        state=r.obs.state,
        attempts=len(r.attempts),
        host=last.host if last else "-",
        config_hash=last.config_hash if last else "-",
        blueprint_hash=r.blueprint_hash,
        final=s.final if s else None,
        auc=s.auc if s else None,
        steps=r.steps_done,
        episodes=r.episodes,
        wall_s=r.wall_s,
    )


def build_report_data(
    *,
    campaign: str,
    goal: Goal,
    budget: ResearchBudget,
    policy: str,
    stages: list[dict[str, Any]],
    records: list[RunRecord],
    provenance: dict[str, Any],
    calibration: list[dict[str, Any]] | None = None,
    eval_items: int | None = None,
    slots: int = 1,
    model: str = "",
) -> ReportData:
    """Assemble the report from the leader's stage records (design, decision) and the store's runs.
    Evidence pools the runs at each stage's step count (a re-pilot with more steps supersedes the first)."""
    q = question_of(goal, budget, eval_items)
    designs = [StageDesign.model_validate(st["design"]) for st in stages]
    views = []
    for st in stages:
        design = StageDesign.model_validate(st["design"])
        so_far = [r.obs for r in records if r.obs.stage <= design.index and r.budget_steps == design.steps]
        ev_k = answer_evidence(q, so_far, designs[: len(views) + 1], budget)
        labels = {r.obs.label for r in records if r.obs.stage == design.index}
        views.append(
            StageView(
                index=design.index,
                design=design,
                run_ids=list(st.get("run_ids", [])),
                eta_s=st.get("eta_s"),
                # the stage's runs over the slots, as its ETA schedules them (3 runs on 2 slots: 2 runs' time)
                actual_s=schedule_seconds([r.wall_s for r in records if r.obs.stage == design.index], slots),
                arms=_arm_rows(ev_k, labels),
                verdict=ev_k.answer,
                decision=st.get("decision") or {},
                dropped=dict(st.get("dropped") or {}),
            )
        )
    final_steps = StageDesign.model_validate(stages[-1]["design"]).steps if stages else budget.steps
    ev = answer_evidence(q, [r.obs for r in records if r.budget_steps == final_steps], designs, budget)
    runs = [_run_row(r) for r in records]
    failures = []
    for r in records:
        for a in r.attempts:
            if a.state in ("failed", "timed_out", "stale"):
                retried = a.number < len(r.attempts)
                failures.append(
                    {
                        "run_id": r.obs.run_id,
                        "name": r.name,
                        "attempt": a.number,
                        "state": a.state,
                        "failure_kind": a.failure_kind or "-",
                        "reason": a.reason,
                        "host": a.host,
                        "outcome": f"retried as attempt {a.number + 1}"
                        if retried
                        else f"final (run {r.obs.state})",
                        "fix": r.attempts[a.number].fix if retried else None,
                    }
                )
    compute = {
        "runs": len(records),
        "attempts": sum(len(r.attempts) for r in records),
        "succeeded": sum(1 for r in records if r.obs.state == "succeeded"),
        "steps": sum(r.steps_done for r in records),
        "episodes": sum(r.episodes for r in records),
        "slot_hours": sum(r.wall_s for r in records) / 3600,
        "hosts": sorted({a.host for r in records for a in r.attempts}),
    }
    data = ReportData(
        campaign=campaign,
        goal=goal,
        budget=budget,
        policy=policy,
        stages=views,
        evidence=ev,
        final_arms=_arm_rows(ev),
        runs=runs,
        failures=failures,
        cancelled=[row for row in runs if row.state == "cancelled"],
        compute=compute,
        provenance=provenance,
        calibration=list(calibration or []),
        model=model,
        power=achieved_power(goal, budget, ev, list(calibration or []), designs),
    )
    allowed = allowed_numbers(data)
    for v in data.stages:  # what an LLM wrote is prose: its numbers must be the report's own
        if v.design.author != "offline":
            v.design = _vet_design(v.design, allowed)
        if not str(v.decision.get("author", "offline")).startswith("offline"):
            v.decision = {**v.decision, "reason": vet_prose(v.decision.get("reason", ""), allowed)}
    return data


def _vet_design(design: StageDesign, allowed: set[str]) -> StageDesign:
    return design.model_copy(
        update={
            "purpose": vet_prose(design.purpose, allowed),
            "hypothesis": vet_prose(design.hypothesis, allowed),
            "rationale": [vet_prose(r, allowed) for r in design.rationale],
            "arms": [a.model_copy(update={"why": vet_prose(a.why, allowed)}) for a in design.arms],
        }
    )


def allowed_numbers(data: ReportData) -> set[str]:
    """Every number the report prints from the store, the design and the budget (formatted as printed):
    what LLM prose may repeat. LLM-written text itself is not a source."""
    texts = [data.evidence.answer, *(v.verdict for v in data.stages)]
    texts += [
        v.decision.get("reason", "")
        for v in data.stages
        if str(v.decision.get("author", "offline")).startswith("offline")
    ]
    nums = {m.group(0).lstrip("+") for t in texts for m in _NUMBER.finditer(t)}
    for row in data.final_arms + [a for v in data.stages for a in v.arms]:
        nums |= {
            fmt(row.x),
            fmt(row.mean),
            fmt(row.lo) if row.lo is not None else "",
            fmt(row.hi) if row.hi is not None else "",
            str(row.n),
        }
    for c in data.calibration:
        nums |= {
            fmt(c.get(k))
            for k in ("untrained", "gain", "gain_lo", "gain_hi", "sigma", "effect")
            if c.get(k) is not None
        }
        nums |= {fmt(g.get(k)) for g in c.get("piloted", []) for k in ("gain", "gain_lo", "gain_hi") if g.get(k) is not None}
    if data.evidence.untrained is not None:
        u = data.evidence.untrained
        nums |= {fmt(u.mean), fmt(u.lo), fmt(u.hi)}
    for v in data.stages:
        nums |= {str(v.index), str(v.design.steps), str(v.design.n_runs), str(len(v.design.arms))}
        nums |= {fmt(a.x) for a in v.design.arms} | {
            fmt(a.level) for a in v.design.arms if a.level is not None
        }
        nums |= {str(sd) for a in v.design.arms for sd in a.seeds}
    nums |= {str(r.run_id) for r in data.runs}
    nums |= {
        str(x)
        for x in (data.budget.max_stages, data.budget.max_runs, data.budget.steps, data.budget.max_seeds)
    }
    return {n for n in nums if n}


def vet_prose(text: str, allowed: set[str]) -> str:
    """LLM prose with every number that is not one of the report's own replaced by "[unverified]"."""

    def sub(m: re.Match[str]) -> str:
        tok = m.group(0).lstrip("+")
        return m.group(0) if tok in allowed or tok.rstrip("%") in allowed else "[unverified]"

    return _NUMBER.sub(sub, text)
