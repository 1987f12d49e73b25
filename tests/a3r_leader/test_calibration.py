"""The calibration stage and the plan: the reference configuration, what the pilot's numbers decide, the
grid sized from them, and `a3r plan` printing it all without running anything."""

from __future__ import annotations

import json

import pytest

from a3r.analysis.stats import sigma_upper, welch_power
from a3r.leader.calibration import (
    calibration_stage,
    grid_run_seconds,
    measure,
    measure_arms,
    no_training_advice,
    pool_seeds,
    recalibration,
    reference_arm,
    repilot_steps,
    size_budget,
    wall_budget_advice,
)
from a3r.leader.costs import run_seconds
from a3r.leader.design import Arm, BudgetError, ResearchBudget, StageDesign, first_stage
from a3r.leader.goals import parse_goal
from a3r.leader.policy import OfflinePolicy

BASE = {"eval_size": 64, "swarm": {"model": {"name": "smollm2-135m"}, "training": {"lr": 2e-5}}}


def test_reference_is_fixed_by_the_question_not_the_data():
    b = ResearchBudget(grid_points=3)
    assert reference_arm(parse_goal("smallest batch size that trains arithmetic (2 to 8)"), b) == (8, None)
    assert (
        reference_arm(parse_goal("largest learning rate that trains arithmetic (1e-6 to 1e-4)"), b)[0] == 1e-6
    )
    # compare/best: the base job's own value, or the tested value nearest it on the knob's scale
    lr = parse_goal("compare learning rate 1e-7 with 3e-5 on arithmetic")
    assert reference_arm(lr, b, BASE) == (3e-5, None)
    assert reference_arm(parse_goal("gspo versus dapo on arithmetic"), b, BASE)[0] == "gspo"


def test_steps_as_the_second_factor_calibrate_the_most_trained_level():
    """Issue 25: the generous end of the steps is the most-trained level. On the old code the reference took
    the first (4) and the advice asked for "larger step counts (e.g. 8 or 16)", which the question holds."""
    budget = ResearchBudget(grid_points=3, steps=20)
    goal = parse_goal("smallest batch size for arithmetic (2 to 8); do the training steps (4 to 32) change it?")
    assert goal.secondary.key == "swarm.training.max_steps"
    assert reference_arm(goal, budget, BASE) == (8, 32)
    design = calibration_stage(goal, budget, base_job=BASE)
    assert [(a.x, a.level) for a in design.arms] == [(8, 32)]
    cal = measure(goal, budget, design, [(0.1, 0.1), (0.1, 0.1), (0.1, 0.12)], [10, 10, 10], eval_items=64)
    advice = no_training_advice(goal, budget, BASE, cal)
    assert "32 steps (the reference configuration" in advice and "(e.g. 64 or 128)" in advice
    # any other second factor keeps its first level
    lr = parse_goal("smallest batch size for arithmetic (1 to 64); does the learning rate change it?")
    assert reference_arm(lr, budget, BASE)[1] == 1e-6


def test_a_visible_gain_sizes_the_grid_for_power():
    goal = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    budget = ResearchBudget(grid_points=3, steps=8, max_seeds=8)
    design = calibration_stage(goal, budget)
    assert design.kind == "calibration" and [(a.x, a.seeds) for a in design.arms] == [(8, [0, 1, 2])]
    cal = measure(
        goal, budget, design, [(0.25, 0.55), (0.25, 0.61), (0.25, 0.50)], [140, 150, 130], eval_items=64
    )
    assert cal.visible and cal.gain == pytest.approx(0.3033, abs=1e-3) and cal.run_s == pytest.approx(140)
    assert cal.effect == pytest.approx(cal.gain / 2)  # half the reference gain is worth detecting
    # sigma is planned at its 80% upper bound from 3 seeds, not at the point estimate
    assert cal.sigma_plan == pytest.approx(sigma_upper(cal.sigma, 3)) and cal.sigma_plan > 2 * cal.sigma
    # a minimum is confirmed by two tests (answer passes, neighbour fails), each sized for 90% power, with
    # the neighbour's gain tested against half the reference's (Welch df, as the verdict computes it)
    one = welch_power(cal.sigma_plan, cal.effect, cal.seeds_per_arm, scale_b=0.5, floor_sd=1 / 64)
    less = welch_power(cal.sigma_plan, cal.effect, cal.seeds_per_arm - 1, scale_b=0.5, floor_sd=1 / 64)
    assert one >= 0.9 > less
    sized, why = size_budget(goal, budget, cal, runs_done=3, wall_spent_s=400)
    # the grid explores with the budget's seeds; the confirmation carries the power, and says what it buys
    assert sized.seeds == 3 and sized.steps == 8 and sized.effect == cal.effect
    assert any(w.startswith("Power: the confirmation needs") for w in why)
    pooled, why = size_budget(goal, budget.model_copy(update={"confirm": False}), cal, 3, 400)
    assert pooled.seeds == min(cal.seeds_per_arm, 8)
    # a budget that cannot reach 80% says so, with the runs and run time that would
    small = budget.model_copy(update={"max_runs": 12})
    _sized, why = size_budget(goal, small, cal, runs_done=3, wall_spent_s=400, per_run_s=100)
    grid_runs = 2 * 3  # batch sizes 2 and 4 (8 keeps its pilot seeds), 3 seeds each
    total = 3 + grid_runs + 3 * cal.seeds_per_arm
    assert any(w.startswith("Below 80%") and f"max_runs={total}" in w and f"{(total - 3) * 100} s" in w for w in why)
    # a wall budget caps the runs at the measured cost per run
    tight = budget.model_copy(update={"total_wall_s": 1000.0})
    capped, why = size_budget(goal, tight, cal, runs_done=3, wall_spent_s=400, per_run_s=100)
    assert capped.max_runs == 3 + 6 and any("wall budget" in w for w in why)
    # on two slots the 600 s left hold 6 rounds of 2 runs, not 6 runs
    two, why = size_budget(goal, tight, cal, runs_done=3, wall_spent_s=400, per_run_s=100, slots=2)
    assert two.max_runs == 3 + 12 and any("12 more run(s) at about 100 s each on 2 slot(s)" in w for w in why)


def test_a_calibration_that_spends_the_wall_budget_ends_in_cannot_tell_with_the_budget_that_would_do():
    # the demo's shape: 3 pilot runs of batch size 8 at 270 s each spent 810 s of 1080
    goal = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    budget = ResearchBudget(grid_points=2, steps=8, seeds=5, max_seeds=5, max_stages=1, min_stages=1,
                            max_runs=8, total_wall_s=1080.0)
    design = calibration_stage(goal, budget)
    cal = measure(goal, budget, design, [(0.25, 0.55), (0.25, 0.61), (0.25, 0.50)], [270, 270, 270],
                  eval_items=64)
    sized, _why = size_budget(goal, budget, cal, runs_done=3, wall_spent_s=810, per_run_s=120)
    assert sized.max_runs == 3 + 2  # floor(270 / 120)
    with pytest.raises(BudgetError) as e:
        OfflinePolicy().plan_stage(goal, sized, [design], None)
    assert (e.value.needed, e.value.left) == (3, 2)  # batch size 2 needs min_seeds=3 runs
    advice = wall_budget_advice(budget, e.value.needed, e.value.left, 120, 810, "demo")
    # 810 s spent + 3 runs x 120 s = 1170 s, rounded up to the minute: 1200; the campaign continues with it
    assert advice.startswith("Cannot tell") and "`a3r resume demo --budget total_wall_s=1200`" in advice
    assert "needs 3 run(s)" in advice and "holds 2 more at about 120 s each" in advice


def test_a_gain_that_is_not_visible_gets_advice_not_a_grid():
    goal = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    budget = ResearchBudget(grid_points=3, steps=4)
    design = calibration_stage(goal, budget)
    cal = measure(goal, budget, design, [(0.0, 0.0), (0.0, 0.0), (0.0, 0.016)], [10, 10, 10], eval_items=64)
    assert not cal.visible and cal.seeds_per_arm == 0
    advice = no_training_advice(goal, budget, {"swarm": {"model": {"name": "tiny"}}}, cal)
    assert "random-weight test fixture" in advice and "--steps 8" in advice and "scores 0" in advice


STEPS_GOAL = "What is the minimum number of training steps that still trains arithmetic: 1, 2, 4 or 8?"


def test_a_repilot_doubles_only_steps_the_reference_would_train():
    """Issue 25: when the steps are studied (as the variable or the second factor) or fixed by the goal,
    the reference arm's own count overrides the stage's, so "twice the steps" would rerun the pilot's
    runs unchanged: no re-pilot. Any other variable keeps the re-pilot with twice the steps."""
    budget = ResearchBudget(grid_points=3, steps=20)
    steps = parse_goal(STEPS_GOAL)
    assert repilot_steps(steps, calibration_stage(steps, budget), BASE) is None
    bs = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    assert repilot_steps(bs, calibration_stage(bs, budget), BASE) == 40
    second = bs.model_copy(update={"secondary": steps.factor})  # batch size at 1, 2, 4 and 8 steps
    assert repilot_steps(second, calibration_stage(second, budget), BASE) is None
    fixed = bs.model_copy(update={"fixed": {"swarm.training.max_steps": 10}})  # as an LLM reading may give
    assert repilot_steps(fixed, calibration_stage(fixed, budget), BASE) is None
    lr = parse_goal("best learning rate for arithmetic (1e-6 to 1e-4)")
    assert repilot_steps(lr, calibration_stage(lr, budget.model_copy(update={"steps": 8})), BASE) == 16
    # a goal that names the run length asks about those steps: a re-pilot at 16 would answer another question
    named = parse_goal("best learning rate for arithmetic (1e-6 to 1e-4) at 8 training steps")
    assert named.steps == 8
    assert repilot_steps(named, calibration_stage(named, budget.model_copy(update={"steps": 8})), BASE) is None


def test_advice_for_studied_steps_names_larger_counts_not_the_steps_flag():
    """With the steps studied, `--steps` changes no run: the advice names the reference's own count and
    asks for larger ones (on the old code it said "try --steps 40", which repeats the same runs)."""
    budget = ResearchBudget(grid_points=3, steps=20)
    goal = parse_goal(STEPS_GOAL)
    design = calibration_stage(goal, budget)
    cal = measure(goal, budget, design, [(0.1, 0.1), (0.1, 0.1), (0.1, 0.12)], [10, 10, 10], eval_items=64)
    advice = no_training_advice(goal, budget, BASE, cal)
    assert not cal.visible and "--steps" not in advice
    assert "8 steps (the reference configuration steps=8) may be too few" in advice
    assert "larger step counts (e.g. 16 or 32)" in advice and "learning rate 2e-05 may be too small" in advice
    fixed = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    fixed = fixed.model_copy(update={"fixed": {"swarm.training.max_steps": 10}})
    advice = no_training_advice(fixed, budget, BASE, cal)
    assert "--steps" not in advice and "10 steps may be too few, and the goal fixes them" in advice


def test_the_grid_keeps_the_pilot_seeds():
    cal = StageDesign(
        index=1,
        kind="calibration",
        purpose="p",
        hypothesis="h",
        steps=8,
        arms=[Arm(x=8, seeds=[0, 1, 2], why="pilot")],
    )
    grid = StageDesign(
        index=2,
        kind="grid",
        purpose="p",
        hypothesis="h",
        steps=8,
        arms=[Arm(x=x, seeds=[0, 1, 2], why="g") for x in (2, 4, 8)],
    )
    pooled = pool_seeds(grid, [cal])
    assert [(a.x, a.seeds) for a in pooled.arms] == [(2, [0, 1, 2]), (4, [0, 1, 2])]
    assert pool_seeds(grid, [cal.model_copy(update={"steps": 4})]) is grid  # other steps: nothing pooled


def test_cost_model_scales_the_measured_cost_per_arm():
    goal = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    budget = ResearchBudget(grid_points=3, steps=8)
    job = {**BASE, "swarm": {**BASE["swarm"], "pool": {"batch_size": 8, "group_size": 8}}}
    base = {**BASE, "swarm": {**BASE["swarm"], "pool": {"group_size": 8}}}
    ref = run_seconds(job, 8)
    cal = measure(
        goal, budget, calibration_stage(goal, budget), [(0.2, 0.5)] * 3, [ref * 0.8] * 3, eval_items=64
    )
    per_run = grid_run_seconds(goal, budget, cal, base)
    # the grid runs batch sizes 2 and 4 only (8 keeps its pilot seeds): their mean cost, relative to 8's
    small = [
        run_seconds({**job, "swarm": {**job["swarm"], "pool": {"batch_size": b, "group_size": 8}}}, 8)
        for b in (2, 4)
    ]
    assert per_run == pytest.approx(cal.run_s * (small[0] + small[1]) / 2 / ref)
    assert per_run < cal.run_s
    assert run_seconds({"swarm": {"model": {"name": "some/hf-dir"}}}, 8) is None


def test_plan_prints_the_question_stages_and_eta_without_running(capsys, tmp_path, monkeypatch):
    from a3r.cli import main

    monkeypatch.chdir(tmp_path)
    goal = "Which learning rate trains the arithmetic agent fastest: 1e-6, 1e-5 or 1e-4?"
    assert main(["plan", goal, "--json", "--steps", "8"]) == 0
    plan = json.loads(capsys.readouterr().out)
    q = plan["question"]
    assert (q["variable"], q["values"], q["task"], q["model"]) == (
        "swarm.training.lr",
        [1e-6, 1e-5, 1e-4],
        "arithmetic",
        "smollm2-135m",
    )
    assert q["score"] == "auc eval_accuracy"  # "fastest" is speed of learning
    kinds = [s["kind"] for s in plan["stages"]]
    assert kinds == ["calibration", "grid"] and plan["stages"][0]["arms"][0]["x"] == 1e-5
    assert plan["eta_s"] > 0 and plan["stages"][1]["runs"] == 6  # the reference arm keeps its pilot seeds
    assert not list(tmp_path.iterdir())  # nothing was created
    assert main(["plan", goal]) == 0
    text = capsys.readouterr().out
    assert "Question as understood" in text and "ETA of these stages" in text
    assert main(["plan", "make it better"]) == 2
    assert "cannot understand the goal" in capsys.readouterr().err


# -- issue 25: answers that land ---------------------------------------------------------------------------
BATCH_GOAL = "Does batch size 2 or 8 train arithmetic better in 8 steps?"  # the real SmolLM2 campaign's goal


def _batch_goal():
    goal = parse_goal(BATCH_GOAL)
    return goal, ResearchBudget(steps=goal.steps)  # as `graph.effective_budget` applies the goal's steps


def test_a_goal_that_names_its_steps_is_never_repiloted_at_other_steps():
    """Issue 25: "in 8 steps" is the question; a re-pilot at 16 answers another one. On the old code
    `repilot_steps` gave 16 and the advice said "try --steps 32"."""
    goal, budget = _batch_goal()
    assert goal.steps == 8 and budget.steps == 8
    pilot = calibration_stage(goal, budget, base_job=BASE)
    assert repilot_steps(goal, pilot, BASE) is None
    # a minimum over a range keeps the reference-only rule: no re-pilot either, so no second calibration
    small = parse_goal("smallest batch size that trains arithmetic (2 to 8) in 8 steps")
    assert small.steps == 8
    small_budget = ResearchBudget(steps=8, grid_points=3)
    assert recalibration(small, small_budget, [calibration_stage(small, small_budget, base_job=BASE)], BASE) is None
    # the real pilot of issue 25 (bs=2, seeds 0-2; seed 0 a low outlier): not visible
    cal = measure(goal, budget, pilot, [(0.25, 0.203), (0.25, 0.453), (0.25, 0.484)], [105] * 3, eval_items=64)
    assert not cal.visible
    advice = no_training_advice(goal, budget, BASE, cal)
    assert "--steps" not in advice
    assert 'the goal names them ("in 8 steps"): ask with more steps (e.g. 16)' in advice


def test_a_compare_whose_reference_does_not_train_pilots_the_other_value_on_the_same_seeds_and_steps():
    """Issue 25: the campaign gave up after bs=2 alone failed to show training; bs=8, which trains, never
    ran. The one more calibration runs the first grid's other values on the pilot's seeds and steps, and
    their runs are the grid's (nothing is run twice). On the old code `recalibration` did not exist and the
    graph re-piloted bs=2 at 16 steps."""
    goal, budget = _batch_goal()
    pilot = calibration_stage(goal, budget, base_job=BASE)
    assert [(a.x, a.seeds) for a in pilot.arms] == [(2, [0, 1, 2])]
    again = recalibration(goal, budget, [pilot], BASE)
    assert again.kind == "calibration" and again.index == 2 and again.steps == 8
    assert [(a.x, a.seeds) for a in again.arms] == [(8, [0, 1, 2])]
    assert recalibration(goal, budget, [pilot, again], BASE) is None  # every value piloted at these steps
    # the figures of the committed 12-seed sweep's first seeds: bs=8 trains where bs=2 does not show it
    by_arm = {
        "bs=2": [(0.25, 0.203), (0.25, 0.453), (0.25, 0.484)],
        "bs=8": [(0.25, 0.578), (0.25, 0.625), (0.25, 0.594)],
    }
    cal = measure_arms(goal, budget, again, by_arm, [105, 105, 105, 150, 150, 150], eval_items=64)
    assert cal.visible and cal.label == "bs=8" and cal.runs == 6
    assert [(p.label, p.visible) for p in cal.piloted] == [("bs=2", False), ("bs=8", True)]
    gains8 = [0.328, 0.375, 0.344]
    assert cal.gain == pytest.approx(sum(gains8) / 3, abs=1e-9)
    assert cal.effect == pytest.approx(cal.gain / 2)  # half the visible arm's gain
    # sigma pools both arms' within-arm spread (df 4), not the visible arm's alone
    gains2 = [-0.047, 0.203, 0.234]
    ss = sum((g - sum(gs) / 3) ** 2 for gs in (gains2, gains8) for g in gs)
    assert cal.sigma == pytest.approx((ss / 4) ** 0.5, abs=1e-9)
    # the grid has nothing left to run: the policy plans from the pooled evidence (the confirmation)
    sized, _why = size_budget(goal, budget, cal, runs_done=6, wall_spent_s=0)
    stages = [pilot, again]
    assert first_stage(goal, sized, prior=stages) is None
    nxt = OfflinePolicy().plan_stage(goal, sized, stages, _evidence(goal, sized, stages, by_arm))
    # (no difference is shown on 3 seeds yet: more seeds on both, continuing their seed numbers)
    assert (nxt.index, nxt.kind) == (3, "refine")
    assert [(a.x, a.seeds) for a in nxt.arms] == [(2, [3, 4, 5]), (8, [3, 4, 5])]


def test_the_plan_says_which_values_are_piloted_if_the_reference_shows_no_training(capsys, tmp_path, monkeypatch):
    """Issue 25: the plan described the calibration and the grid but not the contingency the leader acts on
    when the reference shows no training (`recalibration` -> `pilot_others`): the first grid's other values
    on the pilot's seeds and steps. The plan names them, from the same function; a minimum over a range
    (whose reference speaks for every value) says nothing of it."""
    from a3r.cli import main
    from a3r.leader.planning import plan_campaign

    monkeypatch.chdir(tmp_path)
    assert main(["plan", BATCH_GOAL]) == 0
    text = capsys.readouterr().out
    line = (
        "  If the reference configuration bs=2 shows no training, the calibration pilots the first grid's other "
        "value(s) bs=8 on the same seeds [0, 1, 2] (8 steps per run)"
    )
    assert line in text
    # stated under the calibration stage, before the grid
    assert text.index("(calibration (reference configuration))") < text.index(line) < text.index("coarse grid")
    assert main(["plan", BATCH_GOAL, "--json"]) == 0
    assert "bs=8 on the same seeds [0, 1, 2]" in json.loads(capsys.readouterr().out)["if_no_training"]
    # a best of three: both other values, named as the leader would pilot them
    best = parse_goal("Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?")
    plan = plan_campaign(best, ResearchBudget(), BASE)
    assert "the first grid's other value(s) lr=3e-06, lr=6e-05 on the same seeds [0, 1, 2] (20 steps per run)" in (
        plan.render()
    )
    small = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    plan = plan_campaign(small, ResearchBudget(grid_points=3), BASE)
    assert plan.if_no_training is None and "other value" not in plan.render()
    # without a calibration there is nothing to pilot
    assert plan_campaign(best, ResearchBudget(calibrate=False), BASE).if_no_training is None


def _evidence(goal, budget, stages, by_arm):
    """The evidence of calibration runs given as (step-0, final) per arm label (seeds in order)."""
    from a3r.analysis import RunObs
    from a3r.report import answer_evidence, question_of

    x_of = {a.x: a for st in stages for a in st.arms}
    obs = []
    for label, pairs in by_arm.items():
        x = next(x for x in x_of if f"={x}" in label)
        stage = next(st.index for st in stages for a in st.arms if a.x == x)
        for seed, (start, end) in enumerate(pairs):
            obs.append(
                RunObs(
                    run_id=len(obs) + 1, stage=stage, seed=seed, x=x, level=None, label=label, state="succeeded",
                    series=((0, start), (budget.steps, end)), calibration=True,
                )
            )
    return answer_evidence(question_of(goal, budget, 64), obs, stages, budget)


def test_a_minimum_over_a_range_keeps_the_reference_only_recalibration():
    """Its reference is the generous end (the value that should train if any does): no pilot of the other
    values, the re-pilot with twice the steps as before."""
    goal = parse_goal("smallest batch size that trains arithmetic (2 to 8)")
    budget = ResearchBudget(grid_points=3, steps=8)
    again = recalibration(goal, budget, [calibration_stage(goal, budget, base_job=BASE)], BASE)
    assert [(a.x, a.seeds) for a in again.arms] == [(8, [0, 1, 2])] and again.steps == 16
