"""Experimental design: grids, narrowing, seeds where intervals overlap, stage and run budgets."""

from __future__ import annotations

import pytest

from a3r.analysis import RunObs, analyse
from a3r.leader.calibration import calibration_stage
from a3r.leader.design import BudgetError, ResearchBudget, arm_steps, between, first_stage, grid, next_stage
from a3r.leader.goals import Factor, parse_goal
from a3r.report import answer_evidence, question_of


def test_grids_follow_the_variable_scale():
    assert grid(Factor(key="swarm.pool.batch_size", low=1, high=64), 5) == [1, 3, 8, 23, 64]
    assert grid(Factor(key="swarm.training.lr", low=1e-6, high=1e-4), 3) == [1e-6, 1e-5, 1e-4]
    assert grid(Factor(key="temperature", low=0.5, high=1.5), 3) == [0.5, 1.0, 1.5]
    assert grid(Factor(key="swarm.pool.group_size", values=[8, 2, 4]), 5) == [2, 4, 8]
    assert grid(Factor(key="swarm.algorithm.policy_loss", values=["gspo", "dapo"]), 5) == ["gspo", "dapo"]


def test_between_narrows_on_the_scale_and_bisects_integers():
    bs = Factor(key="swarm.pool.batch_size", low=1, high=64)
    assert between(bs, 4, 16, 2, set()) == [6, 10]  # geometric interior points 6.3, 10.1
    assert between(bs, 2, 4, 2, set()) == [3]
    assert between(bs, 3, 4, 2, set()) == []  # nothing left between neighbours
    assert between(bs, 4, 16, 2, {6}) == [10]


def _budget(**kw):
    """The pooled design (no confirmation stage): these tests follow the exploration's own mechanics;
    the confirmation's are tested below with `confirm=True`."""
    return ResearchBudget(**{"max_runs": 60, "steps": 10, "confirm": False, **kw})


HALF = " that still keeps 50% of the best gain"  # a relative criterion: half the reference arm's gain


def test_first_stage_grid_with_secondary_levels():
    goal = parse_goal(
        "find the minimum batch size that still trains arithmetic (1 to 64), and whether max response length changes that"
    )
    s1 = first_stage(goal, _budget())
    assert s1.index == 1 and s1.kind == "grid" and s1.steps == 10
    assert sorted({a.x for a in s1.arms}) == [1, 3, 8, 23, 64] and sorted({a.level for a in s1.arms}) == [
        16,
        128,
    ]
    assert all(a.seeds == [0, 1, 2] for a in s1.arms) and s1.n_runs == 30
    assert s1.rung_step is None  # no early stopping on threshold questions


def test_first_stage_shrinks_to_the_budget_or_says_what_to_raise():
    goal = parse_goal("find the minimum batch size that still trains arithmetic (1 to 64)")
    s1 = first_stage(goal, _budget(max_runs=10))  # 3 points at the minimum of 3 seeds each
    assert s1.n_runs == 9 and len(s1.arms) == 3 and all(len(a.seeds) == 3 for a in s1.arms)
    with pytest.raises(BudgetError, match="raise max_runs"):
        first_stage(
            parse_goal("smallest batch size that trains arithmetic, and whether lr changes that"),
            _budget(max_runs=2),
        )


def test_first_stage_pools_the_calibration_seeds():
    goal = parse_goal("find the minimum batch size that still trains arithmetic (1 to 4)")
    budget = _budget(grid_points=3)
    cal = calibration_stage(goal, budget)
    assert [(a.x, a.seeds) for a in cal.arms] == [(4, [0, 1, 2])]  # the generous end, as a pilot
    s2 = first_stage(goal, budget, prior=[cal])
    assert s2.index == 2 and [(a.x, a.seeds) for a in s2.arms] == [(1, [0, 1, 2]), (2, [0, 1, 2])]
    assert any("Pooled with the calibration runs: bs=4" in r for r in s2.rationale)
    # a pilot at another step count measured another configuration: nothing pooled
    other = first_stage(goal, budget, prior=[cal.model_copy(update={"steps": 5})])
    assert {a.x for a in other.arms} == {1, 2, 4}


def _obs_for(stages, score):
    out, rid = [], 0
    for st in stages:
        for a in st.arms:
            for seed in a.seeds:
                rid += 1
                v = score(a.x, a.level, seed)
                out.append(
                    RunObs(
                        rid, st.index, seed, a.x, a.level, f"{a.x},{a.level}", "succeeded", ((0, 0.0), (2, v))
                    )
                )
    return out


def _q(goal, budget=None):
    return question_of(goal, budget, eval_items=64)


def _run_campaign(goal, budget, score):
    stages = [first_stage(goal, budget)]
    while True:
        ev = analyse(_q(goal, budget), _obs_for(stages, score))
        nxt = next_stage(goal, budget, stages, ev)
        if nxt is None:
            return stages, ev
        stages.append(nxt)


def test_minimum_narrows_the_bracket_until_adjacent():
    goal = parse_goal("find the minimum batch size" + HALF + " on arithmetic (1 to 64)")
    budget = _budget(max_stages=5, min_stages=2)
    stages, ev = _run_campaign(goal, budget, lambda x, lvl, s: 0.8 if x >= 11 else 0.1)
    assert stages[1].kind == "refine" and stages[1].rationale[0].startswith("23 passes and 8 fails")
    assert {a.x for a in stages[1].arms} == {11, 16}
    th = ev.levels[0].threshold
    assert th.answer.x == 11 and th.neighbour.x == 10 and th.confident  # bracket closed: nothing left between
    assert len(stages) <= budget.max_stages


def test_uncertain_arms_get_new_seeds_continuing_their_numbering():
    goal = parse_goal("find the minimum batch size" + HALF + " on arithmetic in {1, 4, 16}")
    budget = _budget(max_seeds=4)
    # batch size 4 is noisy around the criterion (half of 16's gain 0.8 = 0.4): its test is undecided
    s1 = first_stage(goal, budget)
    ev = analyse(_q(goal, budget), _obs_for([s1], lambda x, lvl, s: {1: 0.1, 4: 0.2 + 0.3 * s, 16: 0.8}[x]))
    assert ev.levels[0].threshold.status == {"1,None": "fail", "4,None": "uncertain", "16,None": "pass"}
    s2 = next_stage(goal, budget, [s1], ev)
    more = [a for a in s2.arms if a.x == 4]
    assert more and more[0].seeds == [3] and "undecided" in more[0].why


def test_settled_question_gets_one_confirmation_stage_then_stops():
    goal = parse_goal("find the minimum batch size" + HALF + " on arithmetic in {1, 2}")
    budget = _budget(min_stages=2, max_stages=4)
    stages, ev = _run_campaign(goal, budget, lambda x, lvl, s: 0.8 if x >= 2 else 0.0)
    assert [s.kind for s in stages] == ["grid", "confirm"]
    assert {a.x for a in stages[1].arms} == {1, 2} and all(a.seeds == [3, 4, 5] for a in stages[1].arms)
    assert ev.conclusive and ev.levels[0].threshold.answer.x == 2


def test_stage_and_run_budgets_are_respected():
    goal = parse_goal("find the minimum batch size" + HALF + " on arithmetic (1 to 64)")
    budget = _budget(max_runs=20, max_stages=3)
    stages, _ = _run_campaign(goal, budget, lambda x, lvl, s: 0.8 if x >= 5 else 0.1)
    assert sum(s.n_runs for s in stages) <= 20 and len(stages) <= 3


def _best_second_stage(text: str):
    goal = parse_goal(text)
    budget = _budget()
    s1 = first_stage(goal, budget)
    ev = analyse(_q(goal, budget), _obs_for([s1], lambda x, lvl, s: {2: 0.1, 8: 0.7 + 0.1 * s, 32: 0.75}[x]))
    return s1, next_stage(goal, budget, [s1], ev)


def test_best_of_a_named_set_studies_exactly_that_set_and_reseeds_ties():
    """The set the researcher named is the set studied: no in-between value is added (issue 25: 109 of
    150 simulated campaigns ran values nobody asked for, each costing runs and a tighter correction)."""
    s1, s2 = _best_second_stage("best group size for arithmetic in {2, 8, 32}")
    assert s1.rung_step is None
    assert {a.x for a in s2.arms} <= {2, 8, 32}
    assert any(a.x == 32 and a.seeds == [3, 4, 5] for a in s2.arms)  # not separated from the best: seeds
    assert 2 not in {a.x for a in s2.arms}  # shown worse: nothing more
    # the same through the threshold path: "what group size does arithmetic need: 2, 8 or 32"
    goal = parse_goal("what group size does arithmetic need: 2, 8 or 32?")
    budget = _budget(max_stages=5)
    stages, _ = _run_campaign(goal, budget, lambda x, lvl, s: 0.8 if x >= 8 else 0.1)
    assert {a.x for st in stages for a in st.arms} <= {2, 8, 32}


def test_best_refines_around_the_best_when_asked_or_over_a_range():
    text = "best group size for arithmetic in {2, 8, 32}, and refine around the best"
    assert parse_goal(text).refine
    s1, s2 = _best_second_stage(text)
    assert first_stage(parse_goal(text), _budget(early_stop=True)).rung_step == 5
    xs = {a.x for a in s2.arms}
    assert {4, 16} <= xs  # new values on both sides of the best
    assert any(a.x == 32 and a.seeds == [3, 4, 5] for a in s2.arms)  # not separated from the best: seeds
    assert 2 not in xs  # shown worse: nothing more
    goal = parse_goal("best group size for arithmetic between 2 and 32")
    stages, _ = _run_campaign(goal, _budget(grid_points=3), lambda x, lvl, s: 0.8 - abs(x - 8) / 40 + 0.05 * s)
    assert {a.x for a in stages[0].arms} == {2, 8, 32} and {a.x for a in stages[1].arms} - {2, 8, 32}


def test_compare_tie_adds_seeds_to_both():
    goal = parse_goal("gspo versus dapo on arithmetic")
    s1 = first_stage(goal, _budget())
    ev = analyse(_q(goal), _obs_for([s1], lambda x, lvl, s: 0.5 + 0.1 * s))
    s2 = next_stage(goal, _budget(), [s1], ev)
    assert {a.x for a in s2.arms} == {"gspo", "dapo"} and all(a.seeds == [3, 4, 5] for a in s2.arms)


def test_question_view_of_a_goal():
    budget = _budget(max_stages=3)
    q = question_of(
        parse_goal("find the minimum batch size that still trains arithmetic efficiently (1 to 64)"),
        budget,
        64,
    )
    assert (q.shape, q.name, q.statistic, q.metric) == ("minimum", "batch size", "auc", "eval_accuracy")
    assert (q.looks, q.min_seeds, q.eval_items, q.criterion_value) == (3, 3, 64, 0.0)
    assert q.level == pytest.approx(1 - 0.05 / 3)


def test_nothing_trains_refines_nothing():
    goal = parse_goal("find the minimum batch size that still trains arithmetic in {1, 4}")
    s1 = first_stage(goal, _budget())
    # flat curves around the untrained level: 4's gain interval straddles 0, 1 sits at 0
    ev = analyse(_q(goal), _obs_for([s1], lambda x, lvl, s: {1: 0.0, 4: 0.2 * s}[x]))
    assert ev.nothing_trains and ev.answer.startswith("Cannot tell")
    assert next_stage(goal, _budget(), [s1], ev) is None  # more seeds would only refine noise


def _simulated_values(text: str, truth, campaigns: int = 40) -> set:
    """Every value the real loop runs over `campaigns` simulated campaigns (calibration, measure, sizing,
    first stage, later stages) with seed noise sd 0.05 around `truth(x)` (final held-out accuracy)."""
    import numpy as np

    from a3r.leader.calibration import measure, size_budget

    goal = parse_goal(text)
    budget = ResearchBudget(max_runs=48, steps=10)
    ran = set()
    for c in range(campaigns):
        rng = np.random.default_rng(c)

        def score(x, lvl, s, rng=rng):
            return float(np.clip(truth(x) + rng.normal(0, 0.05), 0, 1))

        cal = calibration_stage(goal, budget)
        finals = [score(cal.arms[0].x, None, s) for s in cal.arms[0].seeds]
        measured = measure(goal, budget, cal, [(0.1, f) for f in finals], [60.0] * 3, eval_items=64)
        sized, _ = size_budget(goal, budget, measured, runs_done=3, wall_spent_s=180)
        stages = [cal, first_stage(goal, sized, prior=[cal])]
        while True:
            ev = analyse(_q(goal, sized), _obs_for(stages, score))
            nxt = next_stage(goal, sized, stages, ev)
            if nxt is None:
                break
            stages.append(nxt)
        ran |= {a.x for st in stages for a in st.arms}
    return ran


def test_the_real_loop_runs_only_the_named_values():
    """Issue 25 simulated the leader loop for a 3-value best goal: 109 of 150 campaigns ran values outside the
    named set. Through the same loop, with a true effect of 0.1 and seed sd 0.05, none does now."""
    best = "Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?"
    assert _simulated_values(best, lambda x: 0.6 if x == 1.5e-5 else 0.5) == {3e-6, 1.5e-5, 6e-5}
    need = "What max_tokens budget does countdown need: 32, 64 or 128?"
    assert _simulated_values(need, lambda x: 0.15 if x < 64 else 0.5) == {32, 64, 128}


# -- the confirmation (the default) ---------------------------------------------------------------------
def _confirming(**kw):
    return ResearchBudget(**{"max_runs": 48, "steps": 10, "effect": 0.15, **kw})


def _run_confirming(goal, budget, score):
    stages = [first_stage(goal, budget)]
    while True:
        ev = answer_evidence(_q(goal, budget), _obs_for(stages, score), stages, budget)
        nxt = next_stage(goal, budget, stages, ev)
        if nxt is None:
            return stages, ev
        stages.append(nxt)


def test_the_answer_comes_from_a_confirmation_on_fresh_seeds():
    goal = parse_goal("best group size for arithmetic in {2, 8, 32}")
    budget = _confirming()
    # seed noise: 0.05 per seed step, so the exploration's spread is known; 8 is best by 0.2
    stages, ev = _run_confirming(goal, budget, lambda x, lvl, s: {2: 0.3, 8: 0.6, 32: 0.4}[x] + 0.05 * (s % 3))
    assert [s.kind for s in stages] == ["grid", "confirm"]
    confirm = stages[-1]
    assert {a.x for a in confirm.arms} == {2, 8, 32}  # every arm of a 3-value set
    assert all(min(a.seeds) == 3 for a in confirm.arms)  # seed numbers no earlier stage used
    assert sum(s.n_runs for s in stages) <= budget.max_runs
    # the answer reads the confirmation's runs alone: its intervals have exactly the confirmation's seeds
    assert ev.confirm_stage == confirm.index and ev.exploration is not None
    assert all(a.n == len(confirm.arms[0].seeds) for a in ev.levels[0].arms)
    assert ev.conclusive and ev.levels[0].best.best.x == 8 and ev.answer.startswith("Confirmed on fresh seeds")
    assert any("Sized for 80% power" in r for r in confirm.rationale)


def test_a_campaign_without_its_confirmation_names_nothing():
    goal = parse_goal("best group size for arithmetic in {2, 8, 32}")
    budget = _confirming()
    s1 = first_stage(goal, budget)
    ev = answer_evidence(_q(goal, budget), _obs_for([s1], lambda x, lvl, s: {2: 0.1, 8: 0.8, 32: 0.2}[x] + 0.01 * s), [s1], budget)
    assert ev.provisional and not ev.conclusive and ev.answer.startswith("Not confirmed")


def test_exploration_leaves_the_confirmation_its_runs():
    goal = parse_goal("find the minimum batch size" + HALF + " on arithmetic (1 to 64)")
    budget = _confirming(max_runs=40)
    stages, ev = _run_confirming(goal, budget, lambda x, lvl, s: (0.8 if x >= 11 else 0.1) + 0.03 * (s % 3))
    assert stages[-1].kind == "confirm" and sum(s.n_runs for s in stages) <= 40
    confirm = stages[-1]
    # answer, neighbour and the reference (64), each with the same number of fresh seeds
    assert {a.x for a in confirm.arms} >= {64} and len({len(a.seeds) for a in confirm.arms}) == 1
    assert len(confirm.arms[0].seeds) >= budget.min_seeds


def test_a_threshold_confirmation_can_show_the_exploration_s_uncertain_neighbour_is_the_answer():
    # truth: from 8 on every arm gains 0.6, below it nothing; exploration's seeds of 8 are too noisy to show
    # it trains, so exploration answers 23 with 8 uncertain. The confirmation re-runs 3 (the value beyond 8)
    # too, finds 8 passing and 3 failing, and so confirms 8, the smallest tested value that trains.
    goal = parse_goal("find the minimum batch size on arithmetic (1 to 64)")
    budget = _confirming(max_stages=2)

    def score(x, lvl, seed):
        if x == 8 and seed < 3:
            return [0.0, 0.9, 0.3][seed]
        return (0.6 if x >= 8 else 0.0) + 0.01 * (seed % 3)

    stages, ev = _run_confirming(goal, budget, score)
    assert [s.kind for s in stages] == ["grid", "confirm"]
    explored = ev.exploration.levels[0].threshold
    assert explored.answer.x == 23 and explored.status[explored.neighbour.label] == "uncertain"
    assert {a.x for a in stages[-1].arms} == {3, 8, 23, 64}
    th = ev.levels[0].threshold
    assert ev.conclusive and th.answer.x == 8 and th.neighbour.x == 3


def test_a_threshold_confirmation_does_not_confirm_an_answer_whose_tested_neighbour_it_did_not_rerun():
    # the same campaign, but exploration's 8 is shown to fail (below half the reference gain) and the
    # confirmation (23, 8, 64) finds 8 passing: 3 lies between, tested only by the exploration, so 8 is
    # not confirmed and neither is 23
    goal = parse_goal("find the minimum batch size on arithmetic (1 to 64)")
    budget = _confirming(max_stages=2)

    def score(x, lvl, seed):
        if x == 8 and seed < 3:
            return 0.05 + 0.01 * seed
        return (0.6 if x >= 8 else 0.0) + 0.01 * (seed % 3)

    stages, ev = _run_confirming(goal, budget, score)
    assert {a.x for a in stages[-1].arms} == {8, 23, 64}
    th = ev.levels[0].threshold
    assert th.answer.x == 8 and not ev.conclusive and "Not confirmed" in th.verdict


def test_stage_lines_name_each_runs_own_steps_when_the_steps_are_studied():
    """Issue 25: with training steps as the variable each run trains its arm's count, so no stage line may
    say "20 steps" (the budget's): the calibration names the reference's own count (8), the grid says each
    run trains its arm's. A goal that studies something else keeps the budget's count."""
    budget = ResearchBudget()
    steps = parse_goal("What is the minimum number of training steps that still trains arithmetic: 1, 2, 4 or 8?")
    cal = calibration_stage(steps, budget)
    assert [a.x for a in cal.arms] == [8] and "3 seeds, 8 steps each" in cal.purpose
    assert "within 8 steps" in cal.hypothesis and "20 steps" not in cal.purpose + cal.hypothesis
    grid = first_stage(steps, budget, prior=[cal])
    assert grid.purpose.endswith("each run trains its arm's step count.") and "20 steps" not in grid.purpose
    other = parse_goal("find the smallest batch size that still trains arithmetic (2 to 8)")
    assert "20 steps each" in calibration_stage(other, budget).purpose
    assert first_stage(other, budget).purpose.endswith(", 20 steps per run.")


def test_step_counts_written_after_a_range_are_the_second_factor_each_run_trains():
    """A goal giving the learning rate a range and "8 and 32 training steps" plans learning rates inside the
    range, each at exactly 8 and 32 steps (it was read as learning rates 8 and 32, the range dropped)."""
    goal = parse_goal("best learning rate for arithmetic (1e-6 to 1e-4) at 8 and 32 training steps")
    s1 = first_stage(goal, ResearchBudget())
    assert all(1e-6 <= a.x <= 1e-4 for a in s1.arms) and len({a.x for a in s1.arms}) >= 2
    assert {a.level for a in s1.arms} == {8, 32}
    assert {arm_steps(goal, a.x, a.level, s1.steps) for a in s1.arms} == {8, 32}
