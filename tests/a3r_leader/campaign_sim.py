"""Whole campaigns simulated through the leader's real decision loop, with known truth.

The loop is the one `a3r.leader.graph` runs, minus the store and the workers: `calibration_stage` ->
`measure_arms` (-> `recalibration` -> `measure_arms` when no training shows) -> `size_budget` -> `OfflinePolicy.plan_stage` (`first_stage`) -> `pool_seeds` -> `answer_evidence` (`analyse`) ->
`OfflinePolicy.decide` (`next_stage`: refinements, added seeds, confirmation) until the policy finishes or
the budget is spent. Only the runs are synthetic: each run's held-out accuracy is the untrained level, plus
the arm's true gain, plus normal seed noise, rounded to the held-out set's 1/m steps and clipped to [0, 1].

Noise and effect are calibrated from the committed SmolLM2-135M arithmetic runs of the demo question
(64 held-out items, 8 steps, lr 1e-5): `docs/benchmarks/demo_sweep.json` (5 seeds each of batch size 2 and
8) and the demo campaign committed as the example at bcff6a5 (`data/demo_campaign_bcff6a5.json`, copied from
`reports/examples/demo-min-batch-size/report.json` so that regenerating the example leaves this calibration
alone: 3 calibration seeds of batch size 8, 5 of batch size 2). `SIGMA` is the pooled seed-to-seed sd of the per-run gain over those four groups;
`REF_GAIN` the mean gain of batch size 8 (the reference configuration) over its 8 runs; the calibrated
minimum effect is `MIN_EFFECT` (0.5) of it, as `a3r.leader.calibration.measure` computes it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from a3r.analysis import Evidence, RunObs
from a3r.analysis.evidence import MIN_EFFECT
from a3r.leader.calibration import (
    MAX_CALIBRATIONS,
    calibration_stage,
    measure_arms,
    pool_seeds,
    recalibration,
    size_budget,
)
from a3r.leader.design import BudgetError, ResearchBudget, StageDesign, arm_label
from a3r.leader.goals import Goal
from a3r.leader.policy import OfflinePolicy
from a3r.report import answer_evidence, question_of

ROOT = Path(__file__).resolve().parents[2]
EVAL_ITEMS = 64  # the demo's held-out set
P0 = 0.25  # its untrained (step-0) accuracy, the same on every committed run


def _committed_gains() -> dict[str, list[float]]:
    """Per-run gains of the committed demo runs, by group (sweep and campaign kept apart)."""
    sweep = json.loads((ROOT / "docs/benchmarks/demo_sweep.json").read_text())
    camp = json.loads((Path(__file__).parent / "data/demo_campaign_bcff6a5.json").read_text())
    groups: dict[str, list[float]] = {}
    for r in sweep["runs"]:
        groups.setdefault(f"sweep {r['arm']}", []).append(r["gain"])
    p0 = camp["untrained"]["mean"]
    for a in camp["arms"]:
        groups[f"campaign {a['label']}"] = [s - p0 for s in a["scores"]]
    return groups


def _pooled_sd(groups: dict[str, list[float]]) -> float:
    num = sum((len(g) - 1) * statistics.variance(g) for g in groups.values())
    return (num / sum(len(g) - 1 for g in groups.values())) ** 0.5


GAINS = _committed_gains()
SIGMA = _pooled_sd(GAINS)  # about 0.084 (df 14)
REF_GAIN = statistics.fmean(GAINS["sweep bs=8"] + GAINS["campaign bs=8"])  # about 0.32
EFFECT = MIN_EFFECT * REF_GAIN  # the calibrated minimum effect, about 0.16


@dataclass(frozen=True)
class Outcome:
    """How one simulated campaign ended."""

    answer: Any  # the conclusive answer's value, or None (cannot tell)
    runs: int
    stages: int
    evidence: Evidence | None


def _run_stage(
    design: StageDesign,
    goal: Goal,
    gain: Callable[[Any], float],
    rng,
    sigma: float,
    first_id: int,
    rho: float = 0.0,
    seed_effects: dict[int, float] | None = None,
):
    """Synthetic runs of one stage: step-0 score P0, final score P0 + gain + noise on the 1/m grid. With
    `rho` > 0 a share rho of each run's noise variance belongs to its seed (what runs of the same seed share:
    task order and sampling streams), drawn once per campaign in `seed_effects`, so two arms' runs of the
    same seed correlate by rho."""
    arms = [(a, s) for a in design.arms for s in a.seeds]
    noise = rng.normal(0.0, sigma, len(arms))  # (runs,)
    if rho > 0:
        effects = seed_effects if seed_effects is not None else {}
        for s in sorted({s for _a, s in arms} - effects.keys()):
            effects[s] = float(rng.normal(0.0, sigma))
        shared = np.array([effects[s] for _a, s in arms])  # (runs,)
        noise = math.sqrt(rho) * shared + math.sqrt(1 - rho) * noise
    truth = np.array([gain(a.x) for a, _s in arms])  # (runs,)
    final = np.clip(np.round((P0 + truth + noise) * EVAL_ITEMS) / EVAL_ITEMS, 0.0, 1.0)
    return [
        RunObs(
            run_id=first_id + i,
            stage=design.index,
            seed=s,
            x=a.x,
            level=a.level,
            label=arm_label(goal, a.x, a.level),
            state="succeeded",
            series=((0, P0), (design.steps, float(f))),
            calibration=design.kind == "calibration",
        )
        for i, ((a, s), f) in enumerate(zip(arms, final, strict=True))
    ]


def run_campaign(
    goal: Goal,
    budget: ResearchBudget,
    gain: Callable[[Any], float],
    rng: np.random.Generator,
    *,
    sigma: float = SIGMA,
    rho: float = 0.0,
) -> Outcome:
    """One campaign from calibration to the policy's finish, as `a3r.leader.graph` sequences it; `rho` is
    the correlation of two arms' runs of the same seed."""
    policy = OfflinePolicy()
    stages: list[StageDesign] = []
    obs: list[RunObs] = []
    seed_effects: dict[int, float] = {}

    def run(design: StageDesign) -> None:
        stages.append(design)
        obs.extend(_run_stage(design, goal, gain, rng, sigma, len(obs) + 1, rho, seed_effects))

    if not budget.calibrate:  # the graph's plan node: the policy's first stage, nothing measured or sized
        return _research(
            goal, budget, budget, policy, stages, obs, run, policy.plan_stage(goal, budget, [], None)
        )
    pilot: StageDesign | None = calibration_stage(goal, budget, index=1)
    for _attempt in range(MAX_CALIBRATIONS):
        run(pilot)
        # every arm piloted at these steps, as the graph's after_calibration pools them
        by_arm: dict[str, list[tuple[float, float]]] = {}
        for o in obs:
            if o.calibration and stages[o.stage - 1].steps == pilot.steps:
                by_arm.setdefault(o.label, []).append((o.score().initial, o.score().final))
        cal = measure_arms(goal, budget, pilot, by_arm, [1.0] * len(obs), eval_items=EVAL_ITEMS)
        if cal.visible:
            break
        # the graph's one more calibration: the other values on the pilot's seeds, or the reference with
        # twice the steps (a synthetic gain does not depend on them), or none
        pilot = recalibration(goal, budget, stages)
        if pilot is None:
            return Outcome(None, len(obs), len(stages), None)
    else:
        return Outcome(None, len(obs), len(stages), None)
    sized, _why = size_budget(goal, budget, cal, len(obs), 0.0, 1.0)
    current = [o for o in obs if stages[o.stage - 1].steps == pilot.steps]
    ev = answer_evidence(question_of(goal, sized, EVAL_ITEMS), current, stages, sized)
    try:
        nxt = policy.plan_stage(goal, sized, stages, ev)
    except BudgetError:
        return Outcome(None, len(obs), len(stages), None)
    return _research(goal, budget, sized, policy, stages, obs, run, nxt)


def _research(goal, budget, sized, policy, stages, obs, run, nxt) -> Outcome:
    """The research stages, from the first design to the policy's finish (the graph's analyse loop)."""
    q = question_of(goal, sized, EVAL_ITEMS)
    ev = None
    while nxt is not None:
        nxt = pool_seeds(nxt.model_copy(update={"index": len(stages) + 1}), stages)
        if nxt is None:
            break
        run(nxt)
        current = [o for o in obs if stages[o.stage - 1].steps == nxt.steps]
        ev = answer_evidence(q, current, stages, sized)
        if ev.nothing_trains:
            break
        decision = policy.decide(goal, sized, stages, ev)
        nxt = decision.next_stage if decision.action == "continue" else None
    return Outcome(answer_of(ev), len(obs), len(stages), ev)


def answer_of(ev: Evidence | None) -> Any:
    """The conclusive answer's value (single level), or None."""
    if ev is None or not ev.conclusive or len(ev.levels) != 1:
        return None
    le = ev.levels[0]
    if le.threshold is not None:
        return le.threshold.answer.x
    if le.compare is not None:
        return le.compare.winner.x
    return le.best.best.x


def rates(
    goal: Goal,
    budget: ResearchBudget,
    gain: Callable[[Any], float],
    truth: Any,
    n: int,
    seed: int,
    rho: float = 0.0,
):
    """(correct, wrong, mean runs) over n campaigns; `truth` is the right answer (None: no answer is right);
    `rho` the correlation of runs that share a seed."""
    rng = np.random.default_rng(seed)
    outs = [run_campaign(goal, budget, gain, rng, rho=rho) for _ in range(n)]
    right = sum(o.answer is not None and o.answer == truth for o in outs)
    wrong = sum(o.answer is not None and o.answer != truth for o in outs)
    return right / n, wrong / n, statistics.fmean(o.runs for o in outs)
