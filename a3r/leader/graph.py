"""The leader as a LangGraph StateGraph:

    understand -> plan -> write_blueprints -> dispatch -> wait (loop) -> analyse -> write_blueprints | report

- understand: the policy turns the sentence into a `Goal`; the campaign row is created (idempotent).
- plan: the calibration (pilot) stage (`a3r.leader.calibration`), or the policy's first stage when the
  budget turns calibration off. Later designs come out of `analyse`.
- write_blueprints: the design as validated blueprints (engine TrainJobs), kept in the state and written
  as YAML under the report directory for humans.
- dispatch: the stage and its runs in the store through `a3r.api.Workspace`. Creation is idempotent by
  stage name and blueprint hash, so a dispatch re-run after a crash finds its runs instead of duplicating
  them; the background monitor is started if none runs.
- wait: one non-blocking look at the stage's runs; stops dominated arms at the early-stop rung; parks the
  graph with `interrupt()` while runs are unfinished (`a3r.leader.runner` wakes it). Everything before the
  interrupt is a read or an idempotent write, because the node re-runs from its start on resume.
- analyse: after a calibration stage, the pilot's measurements (every arm piloted at its steps) decide:
  size the grid (seeds for the effect, runs for the wall budget) and ask the policy for it, calibrate once
  more (`recalibration`: the other values on the pilot's seeds when the reference does not speak for them,
  else the reference with more steps unless the goal names, studies or fixes the steps), or stop with
  advice. After a research stage: evidence from the store (`a3r.analysis`), then the policy's decision:
  next stage or finish. Nothing is refined once the evidence says no arm trains.
- report: Markdown + HTML from the store and the analysis; LLM prose is vetted for numbers. When the
  workspace has nothing left to run, its monitor and tmux servers are stopped.

Compile with a durable checkpointer (`SqliteSaver`, a file separate from the run store) and invoke with
`{"configurable": {"thread_id": <campaign>}}`; after a crash `graph.invoke(None, config)` continues.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from a3r.api import Workspace
from a3r.blueprints import Blueprint
from a3r.leader.blueprints import stage_blueprints
from a3r.leader.calibration import (
    MAX_CALIBRATIONS,
    Calibration,
    calibration_stage,
    grid_run_seconds,
    measure_arms,
    no_training_advice,
    pool_seeds,
    recalibration,
    size_budget,
    wall_budget_advice,
)
from a3r.leader.costs import runs_within, schedule_seconds
from a3r.leader.design import BudgetError, ResearchBudget, StageDesign, arm_label, steps_studied
from a3r.leader.goals import Goal
from a3r.leader.observe import RunRecord, observe
from a3r.leader.planning import stage_prior_s
from a3r.leader.policy import Decision, Policy
from a3r.leader.provenance import collect_provenance
from a3r.leader.recovery import revise_failed_runs
from a3r.leader.state import LeaderConfig, LeaderState, StageRecord
from a3r.leader.waiting import early_drop, ensure_monitor, rung_ready
from a3r.report import (
    allowed_numbers,
    answer_evidence,
    build_report_data,
    eval_items_of,
    question_of,
    vet_prose,
    write_report,
)
from a3r.states import RunState

__all__ = ["build_graph", "effective_budget"]


def effective_budget(cfg: LeaderConfig, goal: Goal) -> ResearchBudget:
    """The configured budget, with the step count the goal names (if it names one)."""
    return cfg.budget.model_copy(update={"steps": goal.steps}) if goal.steps else cfg.budget


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label.replace("=", ""))


def build_graph(ws: Workspace, policy: Policy) -> StateGraph:
    """The uncompiled leader graph over one workspace and one policy."""

    def ctx(state: LeaderState) -> tuple[LeaderConfig, Goal, ResearchBudget]:
        cfg = LeaderConfig.model_validate(state["config"])
        goal = Goal.model_validate(state["goal"])
        if state.get("budget"):  # sized by the calibration
            return cfg, goal, ResearchBudget.model_validate(state["budget"])
        return cfg, goal, effective_budget(cfg, goal)

    def slots() -> int:
        return max(1, ws.config.slots)

    def stage_s(
        goal: Goal, design: StageDesign, base_job: dict[str, Any], before: list[StageDesign]
    ) -> float | None:
        """The cost model's prior for a stage on this workspace's slots, at their thread count, after the
        stages `before` it (whose step-0 evaluations its runs reuse)."""
        return stage_prior_s(goal, design, base_job, slots(), ws.config.slot_threads, before)

    def records_of(state: LeaderState, goal: Goal) -> list[RunRecord]:
        calib = frozenset(s["index"] for s in state["stages"] if s["design"]["kind"] == "calibration")
        return observe(ws, state["campaign_id"], goal, calib)

    def current(records: list[RunRecord], steps: int) -> list[RunRecord]:
        """Runs at the current step budget: a re-pilot with more steps supersedes the earlier pilot."""
        return [r for r in records if r.budget_steps == steps]

    def elapsed(state: LeaderState) -> float:
        return time.time() - state.get("started_at", time.time())

    def run_cost(records: list[RunRecord]) -> float:
        done = [r.wall_s for r in records if r.obs.state == RunState.SUCCEEDED and r.wall_s > 0]
        return sum(done) / len(done) if done else 0.0

    def with_wall(budget: ResearchBudget, runs_done: int, cost: float, spent: float) -> ResearchBudget:
        """The budget with max_runs cut to what the remaining wall time holds at the measured run cost."""
        if budget.total_wall_s is None or cost <= 0:
            return budget
        fit = runs_done + runs_within(budget.total_wall_s - spent, cost, slots())
        return budget.model_copy(update={"max_runs": min(budget.max_runs, fit)})

    def eta(state: LeaderState, design: StageDesign, records: list[RunRecord]) -> float | None:
        """Wall seconds the stage should take: the cost model's prior, scaled by how the finished stages'
        measured times compared with their priors (falls back to the mean measured run)."""
        cfg, goal, _b = ctx(state)
        done_stages = [StageDesign.model_validate(st["design"]) for st in state["stages"]]
        prior = stage_s(goal, design, cfg.base_job, done_stages)
        measured, expected = 0.0, 0.0
        for i, done in enumerate(done_stages):
            walls = [r.wall_s for r in records if r.obs.stage == done.index and r.obs.state == RunState.SUCCEEDED]
            p = stage_s(goal, done, cfg.base_job, done_stages[:i])
            if walls and len(walls) == done.n_runs and p:
                measured, expected = measured + schedule_seconds(walls, slots()), expected + p
        if prior is not None and expected > 0:
            return prior * measured / expected
        cost = run_cost(records)
        return schedule_seconds([cost] * design.n_runs, slots()) if cost > 0 else None

    def understand(state: LeaderState) -> dict[str, Any]:
        cfg = LeaderConfig.model_validate(state["config"])
        goal = policy.understand(cfg.goal)
        if cfg.metric:
            goal = goal.model_copy(update={"metric": cfg.metric})
        camp = ws.create_campaign(cfg.campaign, cfg.goal)
        return {
            "goal": goal.model_dump(mode="json"),
            "campaign_id": camp.id,
            "provenance": collect_provenance(ws.db_path, cfg.bootstrap_seed),
            "stages": [],
            "pending": None,
            "status": "planning",
        }

    def plan(state: LeaderState) -> dict[str, Any]:
        cfg, goal, budget = ctx(state)
        if budget.calibrate:
            design = calibration_stage(goal, budget, base_job=cfg.base_job)
        else:
            design = policy.plan_stage(goal, budget, [], None)
        if design is None:
            raise ValueError("the policy planned no first stage; the goal needs at least one experiment")
        eta_s = stage_s(goal, design, cfg.base_job, [])  # nothing measured yet: the cost model
        return {"pending": {"design": design.model_dump(mode="json"), "eta_s": eta_s}, "started_at": time.time()}

    def write_blueprints(state: LeaderState) -> dict[str, Any]:
        cfg, goal, budget = ctx(state)
        design = StageDesign.model_validate(state["pending"]["design"])
        bps = stage_blueprints(goal, design, base_job=cfg.base_job, wall_time_s=budget.wall_time_s)
        out = Path(cfg.reports_dir) / cfg.campaign / "blueprints" / f"stage-{design.index}"
        out.mkdir(parents=True, exist_ok=True)
        for bp in bps:
            (out / f"{_safe(bp.label)}.yaml").write_text(bp.to_yaml())
        return {"pending": {**state["pending"], "blueprints": [bp.model_dump(mode="json") for bp in bps]}}

    def dispatch(state: LeaderState) -> dict[str, Any]:
        design = StageDesign.model_validate(state["pending"]["design"])
        stage = ws.create_stage(state["campaign_id"], f"stage-{design.index}", design.purpose)
        arms: dict[str, list[int]] = {}
        for data in state["pending"]["blueprints"]:
            bp = Blueprint.model_validate(data)
            arms[bp.label] = [r.id for r in ws.add_blueprints(stage.id, [bp])]
        ensure_monitor(ws)
        rec = StageRecord(
            index=design.index,
            design=design.model_dump(mode="json"),
            stage_id=stage.id,
            run_ids=[r for ids in arms.values() for r in ids],
            arms=arms,
            rung_done=design.rung_step is None,
            dropped={},
            eta_s=state["pending"].get("eta_s"),
        )
        return {"stages": [*state["stages"], rec], "pending": None, "status": "running"}

    def wait(state: LeaderState) -> dict[str, Any]:
        cfg, goal, _budget = ctx(state)
        st = state["stages"][-1]
        # failed runs the policy can fix go back to the queue with a revised blueprint (idempotent)
        revise_failed_runs(ws, policy, goal, st["run_ids"])
        status = ws.poll_runs(st["run_ids"])
        rung = st["design"].get("rung_step")
        if not status.done and not st["rung_done"] and rung_ready(ws, st["arms"], rung):
            dropped = early_drop(
                ws, state["campaign_id"], goal, st, question_of(goal, _budget, eval_items_of(cfg.base_job))
            )
            return {
                "stages": [*state["stages"][:-1], {**st, "rung_done": True, "dropped": dropped}],
                "waiting": True,
            }
        if status.done:
            return {"waiting": False}
        ensure_monitor(ws)  # a monitor that died, or a leader resumed after a reboot, gets one again
        interrupt(
            {
                "stage": st["index"],
                "run_ids": st["run_ids"],
                "arms": st["arms"],
                "rung_step": None if st["rung_done"] else rung,
            }
        )
        return {"waiting": True}

    def analyse(state: LeaderState) -> dict[str, Any]:
        cfg, goal, budget = ctx(state)
        last = StageDesign.model_validate(state["stages"][-1]["design"])
        records = current(records_of(state, goal), last.steps)
        if last.kind == "calibration":
            return after_calibration(state, cfg, goal, budget, last, records)
        designs = [StageDesign.model_validate(s["design"]) for s in state["stages"]]
        ev = answer_evidence(
            question_of(goal, budget, eval_items_of(cfg.base_job)), [r.obs for r in records], designs, budget
        )
        budget_now = with_wall(budget, sum(d.n_runs for d in designs), run_cost(records), elapsed(state))
        if ev.nothing_trains:
            cal = Calibration.model_validate(state["calibration"][-1]) if state.get("calibration") else None
            decision = Decision(
                action="finish", reason=f"{ev.answer} {no_training_advice(goal, budget, cfg.base_job, cal)}"
            )
        else:
            decision = policy.decide(goal, budget_now, designs, ev)
        return finish_stage(state, ev.answer, decision, designs, records)

    def finish_stage(
        state: LeaderState,
        verdict: str,
        decision: Decision,
        designs: list[StageDesign],
        records: list[RunRecord],
    ) -> dict[str, Any]:
        pending = None
        if decision.action == "continue" and decision.next_stage is not None:
            nxt = decision.next_stage.model_copy(update={"index": len(designs) + 1})
            nxt = pool_seeds(nxt, designs)
            if nxt is not None:
                pending = {"design": nxt.model_dump(mode="json"), "eta_s": eta(state, nxt, records)}
        st = {
            **state["stages"][-1],
            "verdict": verdict,
            "decision": decision.model_dump(mode="json", exclude={"next_stage"}),
        }
        return {"stages": [*state["stages"][:-1], st], "pending": pending}

    def after_calibration(
        state: LeaderState,
        cfg: LeaderConfig,
        goal: Goal,
        budget: ResearchBudget,
        design: StageDesign,
        records: list[RunRecord],
    ) -> dict[str, Any]:
        # every arm piloted at these steps: a calibration of the other values pools the reference's pilot
        piloted = [r for r in records if r.obs.calibration and r.obs.state == RunState.SUCCEEDED]
        by_arm: dict[str, list[tuple[float, float]]] = {}
        for r in piloted:
            if (s := r.obs.score()) is not None:
                by_arm.setdefault(r.obs.label, []).append((s.initial, s.get(goal.statistic)))
        walls = [r.wall_s for r in piloted]
        cal = measure_arms(goal, budget, design, by_arm, walls, eval_items=eval_items_of(cfg.base_job))
        cals = [*state.get("calibration", []), cal.model_dump(mode="json")]
        designs = [StageDesign.model_validate(s["design"]) for s in state["stages"]]
        spent = elapsed(state)
        seen = (
            f"Calibration ({', '.join(a.label for a in cal.piloted) or cal.label}, {cal.runs} runs"
            f"{'' if steps_studied(goal) else f', {cal.steps} steps'}): untrained level {cal.untrained:.3g}, "
            f"{cal.gains_text()}, sigma {cal.sigma:.3g}"
            f"{' (pooled over the arms)' if len(cal.piloted) > 1 else ''}, {cal.run_s:.0f} s per run."
        )
        if cal.visible:
            per_run = grid_run_seconds(goal, budget, cal, cfg.base_job)
            sized, why = size_budget(goal, budget, cal, len(records_of(state, goal)), spent, per_run, slots())
            q = question_of(goal, sized, eval_items_of(cfg.base_job))
            ev = answer_evidence(q, [r.obs for r in records], designs, sized)
            try:
                nxt = policy.plan_stage(goal, sized, designs, ev)
            except BudgetError as e:  # the calibration spent what the grid needed: an answer, not a crash
                advice = wall_budget_advice(budget, e.needed, e.left, per_run, spent, cfg.campaign)
                decision = Decision(action="finish", reason=f"{seen} {' '.join(why)} {advice}")
                out = finish_stage(state, f"{seen} {advice}", decision, designs, records)
                return {**out, "calibration": cals, "budget": sized.model_dump(mode="json")}
            reason = f"{seen} Training is visible ({cal.label}). " + " ".join(why)
            decision = Decision(action="continue", reason=reason, next_stage=nxt, author="offline")
            out = finish_stage(state, seen, decision, designs, records)
            return {**out, "calibration": cals, "budget": sized.model_dump(mode="json")}
        # the other values on the pilot's seeds, or the reference with twice the steps, or None
        nxt = recalibration(goal, budget, designs, cfg.base_job)
        more_s = cal.run_s * (nxt.steps if nxt else 0) / max(design.steps, 1) * (nxt.n_runs if nxt else 0) / slots()
        fits = budget.total_wall_s is None or spent + more_s <= budget.total_wall_s
        if len(cals) < MAX_CALIBRATIONS and cal.runs and nxt is not None and fits:
            what = (
                f"calibrating again with {nxt.steps} steps"
                if nxt.steps != design.steps
                else f"piloting the other values ({', '.join(arm_label(goal, a.x, a.level) for a in nxt.arms)}) "
                f"on the same seeds and {nxt.steps} steps"
            )
            decision = Decision(
                action="continue", reason=f"{seen} Training is not visible yet; {what}.", next_stage=nxt
            )
            out = finish_stage(state, seen, decision, designs, records)
            return {**out, "calibration": cals}
        advice = no_training_advice(goal, budget, cfg.base_job, cal)
        decision = Decision(action="finish", reason=f"{seen} {advice}")
        out = finish_stage(state, f"{seen} {advice}", decision, designs, records)
        return {**out, "calibration": cals}

    def report(state: LeaderState) -> dict[str, Any]:
        cfg, goal, budget = ctx(state)
        records = records_of(state, goal)
        data = build_report_data(
            campaign=cfg.campaign,
            goal=goal,
            budget=budget,
            policy=policy.name,
            stages=state["stages"],
            records=records,
            provenance=state["provenance"],
            calibration=state.get("calibration", []),
            eval_items=eval_items_of(cfg.base_job),
            slots=slots(),
            model=str((cfg.base_job.get("swarm") or {}).get("model", {}).get("name", "")),
        )
        decisions = [Decision.model_validate(s["decision"]) for s in state["stages"] if s.get("decision")]
        allowed = allowed_numbers(data)
        data.prose = {
            k: vet_prose(v, allowed) for k, v in policy.narrate(goal, data.evidence, decisions).items()
        }
        paths = write_report(data, records, Path(cfg.reports_dir) / cfg.campaign)
        live = (RunState.PENDING, RunState.DISPATCHED, RunState.RUNNING)
        if not ws.runs(states=live):  # nothing left to run in this workspace: leave no process behind
            ws.stop_monitor()
            ws.shutdown()  # the tmux servers, which only hold finished panes now
        return {"report": paths, "status": "done"}

    g = StateGraph(LeaderState)
    for name, fn in (
        ("understand", understand),
        ("plan", plan),
        ("write_blueprints", write_blueprints),
        ("dispatch", dispatch),
        ("wait", wait),
        ("analyse", analyse),
        ("report", report),
    ):
        g.add_node(name, fn)
    g.add_edge(START, "understand")
    g.add_edge("understand", "plan")
    g.add_edge("plan", "write_blueprints")
    g.add_edge("write_blueprints", "dispatch")
    g.add_edge("dispatch", "wait")
    g.add_conditional_edges("wait", lambda s: "wait" if s.get("waiting") else "analyse", ["wait", "analyse"])
    g.add_conditional_edges(
        "analyse",
        lambda s: "write_blueprints" if s.get("pending") else "report",
        ["write_blueprints", "report"],
    )
    g.add_edge("report", END)
    return g
