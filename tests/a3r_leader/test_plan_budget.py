"""`a3r plan` says, before anything runs, whether the budget can answer the question and, if not, what
budget would (from the cost model: starts, steps, evaluations and checkpoints)."""

from __future__ import annotations

import argparse
import math

from a3r.leader.blueprints import CHECKPOINT_EVERY_S, DEFAULT_BASE_JOB
from a3r.leader.cli_commands import add_leader_commands
from a3r.leader.costs import RUN_COST
from a3r.leader.design import ResearchBudget
from a3r.leader.goals import parse_goal
from a3r.leader.planning import plan_campaign

GOAL = "Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?"


def _smollm2_run_s(steps: int) -> float:
    """One run of the default job by hand: 4 tasks x 4 episodes per step, 64 held-out items at step 0 and
    at the end, a checkpoint at the first step ending 120 s (CHECKPOINT_EVERY_S) after the last, none at
    the end (the job deletes them)."""
    c = RUN_COST["smollm2-135m"]
    step_s = c.step + c.per_episode * 16
    writes = (steps - 1) // math.ceil(CHECKPOINT_EVERY_S / step_s)
    return c.start + steps * step_s + 2 * 64 * c.per_item + writes * c.per_checkpoint


def test_a_budget_whose_runs_cannot_hold_the_first_comparison_says_what_would():
    plan = plan_campaign(parse_goal(GOAL), ResearchBudget(max_runs=4), DEFAULT_BASE_JOB)
    # 3 pilot runs of the reference (1.5e-5, pooled into its arm) + 2 new values x 3 seeds
    assert [s.n_runs for s in plan.stages] == [3, 6] and {a.x for a in plan.stages[1].arms} == {3e-6, 6e-5}
    assert not plan.can_answer and plan.needed == {"max_runs": 9}
    assert "The budget cannot answer: the first comparison needs 6 run(s) and max_runs 4 leaves 1" in plan.verdict()
    assert "--budget max_runs=9" in plan.verdict()


def test_a_wall_budget_the_cost_model_says_is_too_short_gets_the_one_that_holds_it():
    goal = parse_goal(GOAL)
    eta = 9 * _smollm2_run_s(20)
    assert math.isclose(plan_campaign(goal, ResearchBudget(), DEFAULT_BASE_JOB).eta_s, eta, rel_tol=1e-9)
    short = plan_campaign(goal, ResearchBudget(total_wall_s=eta - 60), DEFAULT_BASE_JOB)
    assert not short.can_answer and short.needed == {"total_wall_s": math.ceil(eta / 60) * 60}
    enough = plan_campaign(goal, ResearchBudget(total_wall_s=eta + 60), DEFAULT_BASE_JOB)
    assert enough.can_answer and enough.needed == {}
    assert enough.verdict().startswith("The budget can answer: the calibration and the first comparison take 9")


def test_checkpoints_and_evaluations_are_in_the_estimate():
    goal = parse_goal(GOAL)
    quiet = {**DEFAULT_BASE_JOB, "swarm": {**DEFAULT_BASE_JOB["swarm"], "training": {"checkpoint_every": 0}}}
    every_step = {**DEFAULT_BASE_JOB, "swarm": {**DEFAULT_BASE_JOB["swarm"], "training": {"checkpoint_every": 1}}}
    with_ckpt = plan_campaign(goal, ResearchBudget(), every_step).eta_s
    without = plan_campaign(goal, ResearchBudget(), quiet).eta_s
    # 9 runs x 19 writes: every step but the last (keep_final_checkpoint false: no write at max_steps)
    assert math.isclose(with_ckpt - without, 9 * 19 * RUN_COST["smollm2-135m"].per_checkpoint, rel_tol=1e-9)


def test_the_plan_command_prints_the_verdict(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    p = argparse.ArgumentParser(prog="a3r")
    p.add_argument("--workspace", default=".")
    p.add_argument("--db")
    add_leader_commands(p.add_subparsers(dest="cmd", required=True))
    args = p.parse_args(["plan", GOAL, "--budget", "max_runs=4"])
    assert args.fn(args) == 0
    out = capsys.readouterr().out
    assert "The budget cannot answer" in out and "--budget max_runs=9" in out
    assert not (tmp_path / "campaigns").exists()  # planning runs and creates nothing
