"""Pure helpers of benchmarks/goal_sweep.py (and demo_sweep.py, its demo preset): the jobs and runs a goal
plans, metrics parsing, the answer read off the analysis per shape, and the campaign comparison. No
training: runs are metrics.jsonl files written by hand with the scores each case needs."""

from __future__ import annotations

import argparse
import json
import math

import pytest
from tests_support import load_benchmark

gs = load_benchmark("goal_sweep")
ds = load_benchmark("demo_sweep")

BEST = "Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?"
COMPARE = "Does batch size 2 or 8 train arithmetic better in 8 steps?"
MINIMUM = "What is the minimum number of training steps that still trains arithmetic: 1, 2, 4 or 8?"


def _plan(tmp_path, text, seeds=(0, 1, 2), settings=(), budget=None):
    goal = gs.parse_goal(text)
    budget = budget or gs.ResearchBudget()
    return goal, gs.plan(
        goal, gs.base_job(settings), goal.steps or budget.steps, list(seeds), tmp_path, budget
    )


def _write_scores(runs, finals: dict, step0: float = 0.25) -> None:
    """metrics.jsonl of each run: eval_accuracy `step0` at step 0 and finals[x][i] (seed index i) at its end."""
    seeds = sorted({r.seed for r in runs})
    for r in runs:
        r.run_dir.mkdir(parents=True, exist_ok=True)
        last = r.job["swarm"]["training"]["max_steps"]
        final = finals[r.x][seeds.index(r.seed)]
        lines = [{"step": 0, "eval_accuracy": step0}, {"step": last, "eval_accuracy": final}]
        (r.run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _answer(tmp_path, text, finals):
    goal, runs = _plan(tmp_path, text)
    _write_scores(runs, finals)
    q = gs.sweep_question(goal, gs.ResearchBudget(), {})  # no eval_size: no binomial floor, t intervals only
    ev = gs.analyse(q, gs.observations(runs, q.metric))
    (le,) = ev.levels
    return gs.level_answer(le), gs.arm_status(le), ev


# -- jobs and runs ----------------------------------------------------------------------------------------
def test_flatten_nested_dicts_to_dotted_keys():
    assert gs.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_with_seed_sets_the_top_level_seed_and_leaves_the_job_alone():
    job = {"seed": 0, "swarm": {"model": {"seed": 0}}}
    seeded = gs.with_seed(job, 2)
    assert seeded == {"seed": 2, "swarm": {"model": {"seed": 0}}}
    assert job["seed"] == 0


def test_split_settings_separates_common_non_default_and_varying():
    defaults = {"lr": 1.0, "pool": {"batch_size": 4, "group_size": 4}, "seed": 0}
    jobs = [
        {"lr": 2.0, "pool": {"batch_size": 1, "group_size": 4}, "seed": 0},
        {"lr": 2.0, "pool": {"batch_size": 4, "group_size": 4}, "seed": 1},
    ]
    common, per_job = gs.split_settings(jobs, defaults)
    assert common == {"lr": 2.0}  # group_size is at its default; the seed is left out
    assert per_job == [{"pool.batch_size": 1}, {"pool.batch_size": 4}]


def test_base_job_applies_settings_as_a3r_research_set_does():
    from a3r.leader.cli_commands import _base_job

    settings = ["swarm.training.lr=3e-5", "eval_size=32", "temperature=0.8"]
    assert gs.base_job(settings) == _base_job(argparse.Namespace(model=None, set=settings))
    assert gs.base_job(settings)["swarm"]["training"]["lr"] == 3e-5
    with pytest.raises(ValueError, match="invalid engine job"):
        gs.base_job(["eval_size=-1"])


def test_research_budget_reads_preset_then_budget_items_like_the_cli():
    b = gs.research_budget({"grid_points": 2, "steps": 8}, ["steps=6,alpha=0.1"])
    assert (b.grid_points, b.steps, b.alpha, b.max_runs) == (2, 6, 0.1, 48)
    with pytest.raises(ValueError, match="--budget takes KEY=VALUE"):
        gs.research_budget({}, ["runs=3"])


def test_plan_runs_every_named_value_with_every_seed_seed_major(tmp_path):
    goal, runs = _plan(tmp_path, BEST, seeds=(0, 1))
    assert [(r.x, r.seed) for r in runs] == [
        (3e-6, 0),
        (1.5e-5, 0),
        (6e-5, 0),
        (3e-6, 1),
        (1.5e-5, 1),
        (6e-5, 1),
    ]
    assert [r.run_dir.name for r in runs[:3]] == ["lr3e-06-seed0", "lr1.5e-05-seed0", "lr6e-05-seed0"]
    for r in runs:
        assert r.job["swarm"]["training"]["lr"] == r.x and r.job["seed"] == r.seed
        assert r.job["swarm"]["training"]["max_steps"] == 20  # the default budget's steps
        assert r.job["swarm"]["model"]["name"] == "smollm2-135m"  # DEFAULT_BASE_JOB


def test_plan_takes_the_goals_steps_and_a_studied_step_count_per_arm(tmp_path):
    _goal, runs = _plan(tmp_path / "c", COMPARE, seeds=(0,))
    assert [(r.x, r.job["swarm"]["training"]["max_steps"]) for r in runs] == [(2, 8), (8, 8)]
    _goal, runs = _plan(tmp_path / "m", MINIMUM, seeds=(0,))
    assert [(r.x, r.job["swarm"]["training"]["max_steps"]) for r in runs] == [(1, 1), (2, 2), (4, 4), (8, 8)]


def _config(tmp_path, text, budget=None):
    budget = budget or gs.ResearchBudget()
    goal, runs = _plan(tmp_path, text, seeds=(0,), budget=budget)
    q = gs.sweep_question(goal, budget, {})
    return gs.sweep_config("t", text, goal, [], budget, goal.steps or budget.steps, runs, q)


def test_the_page_says_each_arm_trains_its_own_step_count_when_the_steps_are_studied(tmp_path):
    """Issue 25: the minimum-steps page said "20 steps each" (the budget's default) for arms that train 1, 2, 4
    and 8 steps. A goal that studies the steps says what varies; any other names the stage's steps."""
    assert gs.steps_md(_config(tmp_path / "m", MINIMUM)) == "each arm training its own step count (1, 2, 4, 8 steps)"
    text = "smallest batch size for arithmetic (2 to 8); do the training steps (4 to 32) change it?"
    two = gs.ResearchBudget(grid_points=2, secondary_levels=2)
    assert gs.steps_md(_config(tmp_path / "s", text, two)) == "each arm training its level's step count (4, 32 steps)"
    assert gs.steps_md(_config(tmp_path / "c", COMPARE)) == "8 steps each (where the arm does not set its own)"


def test_plan_grids_a_range_at_the_budgets_grid_points(tmp_path):
    budget = gs.ResearchBudget(grid_points=3)
    _goal, runs = _plan(
        tmp_path, "find the best learning rate for arithmetic between 1e-6 and 1e-4", (0,), budget=budget
    )
    assert [r.x for r in runs] == [1e-6, 1e-5, 1e-4]


def test_plan_crosses_a_secondary_variable_and_names_runs_by_both(tmp_path):
    text = "find the smallest batch size that still trains arithmetic (2 to 8), and whether max tokens (8 to 16) changes that"
    budget = gs.ResearchBudget(grid_points=2)
    _goal, runs = _plan(tmp_path, text, (0,), budget=budget)
    assert [(r.level, r.x) for r in runs] == [(8, 2), (8, 8), (16, 2), (16, 8)]
    assert runs[1].run_dir.name == "bs8_mt8-seed0" and runs[1].job["max_tokens"] == 8


def test_demo_preset_plans_the_committed_demo_runs(tmp_path):
    p = ds.DEMO_PRESET
    goal = gs.parse_goal(p.goal)
    budget = gs.research_budget(p.budget, [])
    runs = gs.plan(goal, gs.base_job(p.settings), goal.steps or budget.steps, [0, 1], tmp_path, budget)
    assert [r.run_dir.name for r in runs] == ["bs2-seed0", "bs8-seed0", "bs2-seed1", "bs8-seed1"]
    assert {r.job["swarm"]["training"]["max_steps"] for r in runs} == {8}
    assert (p.out, p.runs) == ("docs/benchmarks/demo_sweep", "runs/demo_sweep")


def test_expected_seconds_sums_the_cost_model_and_leaves_out_finished_runs(tmp_path):
    _goal, runs = _plan(tmp_path, COMPARE, seeds=(0, 1))
    each = [gs.run_seconds(r.job, 8) for r in runs]
    runs[0].run_dir.mkdir(parents=True)
    (runs[0].run_dir / "summary.json").write_text("{}")
    cost = gs.expected_seconds(runs)
    assert math.isclose(cost["all_s"], sum(each)) and math.isclose(cost["to_run_s"], sum(each[1:]))
    _goal, tiny = _plan(tmp_path / "t", COMPARE, seeds=(0,), settings=["swarm.model.name=no-such-prior"])
    assert gs.expected_seconds(tiny) == {"all_s": None, "to_run_s": None}


def test_a_failed_run_is_a_message_naming_its_logs_and_the_resume(tmp_path, monkeypatch):
    from engine.errors import ServerExited

    _goal, runs = _plan(tmp_path, COMPARE, seeds=(0,))

    def dead_server(job, run_dir):
        raise ServerExited("the server exited with code -9", -9)

    monkeypatch.setattr(gs, "train", dead_server)
    with pytest.raises(
        SystemExit, match=r"bs=2 seed 0 failed \(ServerExited: .*code -9\).*Run the same command again"
    ):
        gs.execute(runs[0])
    assert not runs[0].done  # left unfinished: the next sweep clears it and runs it again


def test_series_reads_one_metric_first_value_per_step_and_skips_bad_lines():
    data = (
        b'{"step": 0, "eval_accuracy": 0.25}\n'
        b'{"step": 1, "reward_mean": 0.5}\n'
        b"not json\n"
        b'{"step": 6, "eval_accuracy": NaN}\n'
        b'{"step": 6, "eval_accuracy": 0.5}\n'
    )
    assert gs.series_from_bytes(data, "eval_accuracy") == ((0, 0.25), (6, None))
    assert gs.series_from_bytes(data, "reward_mean") == ((1, 0.5),)


# -- the answer, per shape --------------------------------------------------------------------------------
def test_best_answer_when_one_value_beats_every_other(tmp_path):
    finals = {3e-6: [0.30, 0.31, 0.29], 1.5e-5: [0.60, 0.62, 0.61], 6e-5: [0.40, 0.41, 0.39]}
    ans, status, _ev = _answer(tmp_path, BEST, finals)
    assert (ans["value"], ans["leader"], ans["conclusive"]) == (1.5e-5, 1.5e-5, True)
    assert status == {"lr=1.5e-05": "best", "lr=3e-06": "dominated", "lr=6e-05": "dominated"}


def test_best_cannot_tell_when_the_runner_up_is_not_separated(tmp_path):
    finals = {3e-6: [0.30, 0.31, 0.29], 1.5e-5: [0.60, 0.62, 0.61], 6e-5: [0.59, 0.63, 0.61]}
    ans, status, _ev = _answer(tmp_path, BEST, finals)
    assert ans["value"] is None and not ans["conclusive"]
    assert ans["leader"] in (1.5e-5, 6e-5)  # the leading mean, not an answer
    assert sorted(status.values()) == ["best", "dominated", "tied"]


def test_compare_answer_names_the_winner_or_a_tie(tmp_path):
    ans, status, _ev = _answer(tmp_path / "a", COMPARE, {2: [0.40, 0.42, 0.41], 8: [0.55, 0.56, 0.57]})
    assert (ans["value"], ans["conclusive"]) == (8, True)
    assert status == {"bs=2": "worse", "bs=8": "better"}
    ans, status, _ev = _answer(tmp_path / "b", COMPARE, {2: [0.40, 0.42, 0.41], 8: [0.40, 0.43, 0.41]})
    assert (ans["value"], ans["leader"], ans["conclusive"]) == (None, 8, False)
    assert status == {"bs=2": "tie", "bs=8": "tie"}


def test_minimum_answer_needs_its_cheaper_neighbour_shown_to_fail(tmp_path):
    # gains over 0.25: 8 steps 0.31 (the reference), 4 steps 0.26; 2 steps 0.05, shown below half of 0.31
    finals = {1: [0.25, 0.26, 0.24], 2: [0.30, 0.31, 0.29], 4: [0.50, 0.52, 0.51], 8: [0.55, 0.57, 0.56]}
    ans, status, _ev = _answer(tmp_path / "a", MINIMUM, finals)
    assert (ans["value"], ans["conclusive"]) == (4, True)
    assert status["steps=4"] == "pass" and status["steps=2"] == "fail"
    # 2 steps all over the place: not shown to fail, so 4 is only a candidate
    finals[2] = [0.27, 0.55, 0.40]
    ans, status, _ev = _answer(tmp_path / "b", MINIMUM, finals)
    assert (ans["value"], ans["leader"], ans["conclusive"]) == (None, 4, False)
    assert status["steps=2"] == "uncertain"


def test_the_fail_margin_is_the_analysis_own_fraction_of_the_reference_gain(tmp_path):
    """A minimum's arm fails when its gain is shown below 50% (MIN_EFFECT) of the reference's (8 steps):
    the sweep records that line on the gain scale, read from the analysis, and draws it on its figure."""
    finals = {1: [0.25, 0.26, 0.24], 2: [0.30, 0.31, 0.29], 4: [0.50, 0.52, 0.51], 8: [0.55, 0.57, 0.56]}
    _ans, status, ev = _answer(tmp_path, MINIMUM, finals)
    assert status["steps=2"] == "fail"  # gain 0.05, shown below the margin
    ((margin),) = gs.fail_margins(ev)
    assert (margin["secondary_level"], margin["fraction"], margin["reference"]) == (None, 0.5, "steps=8")
    assert margin["gain"] == pytest.approx(0.5 * 0.31)  # half of 8 steps' mean gain over 0.25
    # the criterion row keeps both levels apart: the second variable's (none here) and the confidence
    ((crit),) = gs.criteria(ev)
    assert (crit["secondary_level"], crit["level"]) == (None, 0.95)
    # a compare has no fail margin
    _ans, _status, ev = _answer(tmp_path / "c", COMPARE, {2: [0.40, 0.42, 0.41], 8: [0.55, 0.56, 0.57]})
    assert gs.fail_margins(ev) == []


def test_arm_rows_carry_the_label_and_the_interval_it_was_read_from(tmp_path):
    _ans, _status, ev = _answer(tmp_path, COMPARE, {2: [0.40, 0.42, 0.41], 8: [0.55, 0.56, 0.57]})
    rows = gs.arm_rows(ev)
    assert [(r["arm"], r["n"], r["status"]) for r in rows] == [("bs=2", 3, "worse"), ("bs=8", 3, "better")]
    assert rows[0]["test"]["hi"] < 0  # bs=2 - bs=8, shown below 0
    assert gs.criteria(ev) == []  # a compare has no threshold criterion


# -- the campaign's answer beside the sweep's ---------------------------------------------------------------
def _report(tmp_path, levels, conclusive=True):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"answer": "text", "conclusive": conclusive, "levels": levels}))
    return path


def test_campaign_answers_count_only_conclusive_levels_of_a_conclusive_campaign(tmp_path):
    levels = [{"level": None, "answer": 8, "conclusive": True, "verdict": "8 is better"}]
    assert gs.campaign_answers(json.loads(_report(tmp_path, levels).read_text()))[0]["value"] == 8
    provisional = json.loads(_report(tmp_path, levels, conclusive=False).read_text())
    assert gs.campaign_answers(provisional)[0]["value"] is None  # still waiting for its confirmation
    leading = [{"level": None, "answer": 8, "conclusive": False, "verdict": "Cannot separate ..."}]
    assert (
        gs.campaign_answers(json.loads(_report(tmp_path, leading, conclusive=False).read_text()))[0]["value"]
        is None
    )


@pytest.mark.parametrize(
    ("campaign", "sweep", "outcome"),
    [
        (8, 8, "match"),
        (8.0, 8, "match"),
        (None, None, "match"),
        (None, 8, "cannot tell, sweep answers"),
        (8, None, "answers, sweep cannot tell"),
        (2, 8, "different answer"),
    ],
)
def test_agreement_outcomes(campaign, sweep, outcome):
    got = gs.agreement({"value": sweep}, {"value": campaign})
    assert got == {"outcome": outcome, "match": outcome == "match"}


def test_compare_campaign_matches_level_by_level(tmp_path):
    sweep = [{"level": 8, "value": 4}, {"level": 16, "value": None}]
    levels = [
        {"level": 8.0, "answer": 4, "conclusive": True, "verdict": "..."},
        {"level": 16, "answer": 2, "conclusive": False, "verdict": "Cannot tell ..."},
    ]
    cmp = gs.compare_campaign(_report(tmp_path, levels), sweep)
    assert [le["outcome"] for le in cmp["levels"]] == ["match", "match"] and cmp["match"] is True
    levels[1]["conclusive"] = True
    cmp = gs.compare_campaign(_report(tmp_path, levels), sweep)
    assert [le["outcome"] for le in cmp["levels"]] == ["match", "answers, sweep cannot tell"]
    assert cmp["match"] is False
    cmp = gs.compare_campaign(_report(tmp_path, levels[:1]), sweep)
    assert cmp["levels"][1]["outcome"] == "not run" and cmp["match"] is False


def test_compare_campaign_reads_the_committed_demo_report():
    from pathlib import Path

    report = Path(__file__).resolve().parents[2] / "reports/examples/demo-min-batch-size/report.json"
    cmp = gs.compare_campaign(report, [{"level": None, "value": 2}])
    assert cmp["match"] is True and cmp["levels"][0]["campaign"]["value"] == 2


def test_compare_campaign_refuses_a_report_of_another_goal(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"goal": "another goal", "conclusive": False, "levels": []}))
    with pytest.raises(ValueError, match="answers another goal"):
        gs.compare_campaign(path, [{"level": None, "value": None}], goal=COMPARE)
    assert gs.compare_campaign(path, [{"level": None, "value": None}], goal="another goal")["match"] is False
