"""`a3r plan` says, before anything runs, whether the budget can answer the question and, if not, what
budget would (from the cost model: starts, steps, evaluations and checkpoints)."""

from __future__ import annotations

import argparse
import math

from a3r.config import WorkspaceConfig, local_host
from a3r.leader.blueprints import CHECKPOINT_EVERY_S, DEFAULT_BASE_JOB
from a3r.leader.cli_commands import add_leader_commands
from a3r.leader.costs import RUN_COST, RUN_COST_THREADS, RunCost
from a3r.leader.design import ResearchBudget
from a3r.leader.goals import parse_goal
from a3r.leader.planning import PRIOR_EFFECT_SD, plan_campaign, stage_prior_s
from a3r.leader.power import power_at

GOAL = "Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?"


def _smollm2_run_s(steps: int, c: RunCost | None = None, eval0: bool = True, tokens: int = 32) -> float:
    """One run of the default job by hand: 4 tasks x 4 episodes of up to `tokens` tokens per step, 64 held-out
    items at step 0 (unless `eval0` is False: the run reuses a cached one) and at the end, a checkpoint at
    the first step ending 120 s (CHECKPOINT_EVERY_S) after the last (the server's clock runs through the
    step-0 evaluation), none at the end (the job deletes them). At the constants `c` (default: a run owning
    the host)."""
    c = c or RUN_COST["smollm2-135m"]
    step_s = c.sample_step + c.update_step + (c.sample_token + c.update_token) * 16 * tokens
    eval_s = 64 * c.per_item
    eval0_s = eval_s if eval0 else 0.0
    first = math.ceil((CHECKPOINT_EVERY_S - eval0_s) / step_s)
    writes = 0 if first > steps - 1 else 1 + (steps - 1 - first) // math.ceil(CHECKPOINT_EVERY_S / step_s)
    return c.start + steps * step_s + eval0_s + eval_s + writes * c.per_checkpoint


def test_a_budget_whose_runs_cannot_hold_the_first_comparison_says_what_would():
    plan = plan_campaign(parse_goal(GOAL), ResearchBudget(max_runs=4), DEFAULT_BASE_JOB)
    # 3 pilot runs of the reference (1.5e-5, pooled into its arm) + 2 new values x 3 seeds
    assert [s.n_runs for s in plan.stages] == [3, 6] and {a.x for a in plan.stages[1].arms} == {3e-6, 6e-5}
    # ... and the confirmation the campaign runs after them: 3 arms x min_seeds 3 fresh seeds at the least
    assert plan.confirmation.arms == 3 and plan.confirmation.seeds == 3 and plan.runs == 18
    assert not plan.can_answer and plan.needed == {"max_runs": 18}
    assert "The budget cannot answer: the first comparison needs 6 run(s) and max_runs 4 leaves 1" in plan.verdict()
    assert "the confirmation needs at least 9 run(s)" in plan.verdict() and "--budget max_runs=18" in plan.verdict()


def test_the_confirmation_is_counted_and_the_plan_states_its_power():
    goal = parse_goal(GOAL)
    plan = plan_campaign(goal, ResearchBudget(), DEFAULT_BASE_JOB)
    c = plan.confirmation
    # 48 runs: 9 for the calibration and the grid, the 39 left hold 11 of the 11 seeds per arm that 80%
    # power against PRIOR_EFFECT_SD needs (best of 3: the leader must beat both others)
    assert (c.arms, c.needed, c.seeds) == (3, 11, 11) and plan.runs == 42
    assert power_at("best", 3, 11, 1.0, PRIOR_EFFECT_SD, 0.05, 0.0) >= 0.8 > power_at(
        "best", 3, 10, 1.0, PRIOR_EFFECT_SD, 0.05, 0.0
    )
    assert plan.can_answer and "84% power" in plan.power_line() and "below 80%" not in plan.power_line()
    assert "and the confirmation (3 arm(s) x 11 fresh seed(s)) take 42 run(s)" in plan.verdict()
    # a run budget that holds 5 seeds per arm: it can answer, with the power it buys and what 80% needs
    low = plan_campaign(goal, ResearchBudget(max_runs=24), DEFAULT_BASE_JOB)
    assert low.can_answer and low.confirmation.seeds == 5
    assert f"{100 * power_at('best', 3, 5, 1.0, PRIOR_EFFECT_SD, 0.05, 0.0):.0f}% power" in low.power_line()
    assert "below 80%. 80% needs 11 seed(s) per arm: 42 run(s) in all" in low.power_line()
    assert "--budget max_runs=42" in low.power_line() and "below 80%" in low.verdict()


def test_a_wall_budget_the_cost_model_says_is_too_short_gets_the_one_that_holds_it():
    goal = parse_goal(GOAL)
    # every arm of this goal costs the same and shares one step-0 evaluation (the learning rate is not in
    # its key): on one slot the first calibration run pays it, every later run reuses it
    first, run_s = _smollm2_run_s(20), _smollm2_run_s(20, eval0=False)
    assert first - run_s > 64 * RUN_COST["smollm2-135m"].per_item - 1e-9  # and its checkpoint clock shifts
    full = plan_campaign(goal, ResearchBudget(), DEFAULT_BASE_JOB)
    assert full.stage_eval0 == [1, 0]
    assert math.isclose(full.eta_s, first + 41 * run_s, rel_tol=1e-9)  # 9 first runs + 33 confirmation runs
    # too short for the first stages and a 3-seed confirmation: cannot answer, and the wall that holds them
    short = plan_campaign(goal, ResearchBudget(total_wall_s=first + 17 * run_s - 60), DEFAULT_BASE_JOB)
    assert not short.can_answer and short.needed == {"total_wall_s": math.ceil((first + 17 * run_s) / 60) * 60}
    # enough for 5 seeds per arm: the campaign would cap its confirmation there, and the plan says so
    capped = plan_campaign(goal, ResearchBudget(total_wall_s=first + 23 * run_s + 60), DEFAULT_BASE_JOB)
    assert capped.can_answer and capped.needed == {} and capped.confirmation.seeds == 5
    assert f"--budget total_wall_s={math.ceil((first + 41 * run_s) / 60) * 60})" in capped.power_line()
    assert capped.verdict().startswith("The budget can answer: the calibration, the first comparison and the confirmation")


def test_two_one_thread_slots_price_runs_at_one_thread_and_schedule_them_in_rounds():
    """A3R's default on a 2-core host: 2 slots of 1 thread. Each run costs the 1-thread constants (more than
    a 2-thread run: 1.27x by the two entries since the 1-thread one was refitted after this session's
    speed-ups, 1.7x before), and a stage takes whole rounds of 2 runs: the calibration's 3 runs take 2 runs'
    time, the grid's 6 take 3, the confirmation's 33 take 17 (not 42 / 2 = 21 runs' time in all). The
    calibration's first two runs start together, so both pay the step-0 evaluation; its third and every
    later run reuse it."""
    goal = parse_goal(GOAL)
    paid = _smollm2_run_s(20, RUN_COST_THREADS[("smollm2-135m", 1)])
    one = _smollm2_run_s(20, RUN_COST_THREADS[("smollm2-135m", 1)], eval0=False)
    assert one > _smollm2_run_s(20, eval0=False)
    plan = plan_campaign(goal, ResearchBudget(), DEFAULT_BASE_JOB, slots=2, threads=1)
    assert [s.n_runs for s in plan.stages] == [3, 6] and plan.confirmation.runs == 33
    assert plan.stage_eval0 == [2, 0]
    assert math.isclose(plan.stage_eta_s[0], paid + one, rel_tol=1e-12)  # slot 0: paid, then reused
    assert math.isclose(plan.stage_eta_s[1], 3 * one, rel_tol=1e-12)
    assert math.isclose(plan.confirmation.run_s, one, rel_tol=1e-12)
    assert math.isclose(plan.eta_s, paid + (1 + 3 + 17) * one, rel_tol=1e-9)
    text = plan.render()
    assert "on 2 slot(s) of 1 thread(s) each" in text
    assert "[3 run(s), about " in text and "; 2 pay(s) the step-0 evaluation, 1 reuse it]" in text
    assert "; 0 pay(s) the step-0 evaluation, 6 reuse it]" in text
    assert "the step-0 evaluation only for the runs that find no cached one, none in the confirmation" in text
    assert [s["eval0_runs"] for s in plan.as_json()["stages"]] == [2, 0]
    # a wall budget of the first stages and 6 more rounds holds 12 confirmation runs: 4 seeds per arm
    capped = plan_campaign(
        goal, ResearchBudget(total_wall_s=paid + (4 + 6) * one + 30), DEFAULT_BASE_JOB, slots=2, threads=1
    )
    assert capped.confirmation.seeds == 4 and capped.can_answer


def test_a_stage_reuses_the_step_zero_evaluations_of_the_stages_before_it():
    """The leader's ETA of a stage (`stage_prior_s`, as the graph asks it) knows what ran before: the
    learning-rate grid's 6 runs on 2 one-thread slots take 3 reusing runs after the calibration, and
    without it the first round pays (2 x 3 runs per slot, the first of each paying)."""
    goal = parse_goal(GOAL)
    c1 = RUN_COST_THREADS[("smollm2-135m", 1)]
    paid, one = _smollm2_run_s(20, c1), _smollm2_run_s(20, c1, eval0=False)
    calib, grid = plan_campaign(goal, ResearchBudget(), DEFAULT_BASE_JOB, slots=2, threads=1).stages
    assert math.isclose(stage_prior_s(goal, grid, DEFAULT_BASE_JOB, 2, 1, [calib]), 3 * one, rel_tol=1e-12)
    assert math.isclose(stage_prior_s(goal, grid, DEFAULT_BASE_JOB, 2, 1), paid + 2 * one, rel_tol=1e-12)


def test_arms_that_change_the_step_zero_key_pay_it_in_their_first_round():
    """max_tokens is in the step-0 key: the calibration (16 tokens) and the grid's new arm (64) each pay it
    on both slots in their first round, and their third run reuses it."""
    goal = parse_goal("compare max_tokens 16 with 64 on arithmetic")
    c1 = RUN_COST_THREADS[("smollm2-135m", 1)]
    plan = plan_campaign(goal, ResearchBudget(), DEFAULT_BASE_JOB, slots=2, threads=1)
    assert [[a.x for a in s.arms] for s in plan.stages] == [[16], [64]] and plan.stage_eval0 == [2, 2]
    for eta, tokens in zip(plan.stage_eta_s, (16, 64), strict=True):
        by_hand = _smollm2_run_s(20, c1, tokens=tokens) + _smollm2_run_s(20, c1, eval0=False, tokens=tokens)
        assert math.isclose(eta, by_hand, rel_tol=1e-12), tokens


def test_checkpoints_and_evaluations_are_in_the_estimate():
    goal = parse_goal(GOAL)
    quiet = {**DEFAULT_BASE_JOB, "swarm": {**DEFAULT_BASE_JOB["swarm"], "training": {"checkpoint_every": 0}}}
    every_step = {**DEFAULT_BASE_JOB, "swarm": {**DEFAULT_BASE_JOB["swarm"], "training": {"checkpoint_every": 1}}}
    with_ckpt = plan_campaign(goal, ResearchBudget(), every_step).eta_s
    without = plan_campaign(goal, ResearchBudget(), quiet).eta_s
    # 42 runs (confirmation included) x 19 writes: every step but the last (no write at max_steps)
    assert math.isclose(with_ckpt - without, 42 * 19 * RUN_COST["smollm2-135m"].per_checkpoint, rel_tol=1e-9)


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
    assert "The budget cannot answer" in out and "--budget max_runs=18" in out
    # planned on the slots a new workspace gets here (a 2-core CPU host: two of 1 thread)
    hosts = WorkspaceConfig(hosts=[local_host()])
    each = f" of {hosts.slot_threads} thread(s) each" if hosts.slot_threads else ""
    assert f"the confirmation on {hosts.slots} slot(s){each}: about" in out
    assert not (tmp_path / "campaigns").exists()  # planning runs and creates nothing
