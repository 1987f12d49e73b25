"""benchmarks/goal_sweep.py --from-json: a committed sweep's JSON stands in for its run dirs. The committed
compare sweep (docs/benchmarks/real_goal_compare.json, 24 SmolLM2 runs) is analysed again from its rows
with the same code as a fresh sweep, so its answer and intervals come back exactly; a JSON of another config
is refused; and a campaign report is compared with it level by level. Nothing trains."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from tests_support import load_benchmark

gs = load_benchmark("goal_sweep")

COMMITTED = Path(__file__).resolve().parents[2] / "docs/benchmarks/real_goal_compare.json"
ANALYSIS = ("arms", "untrained", "criterion", "answer")


def _committed() -> dict:
    return json.loads(COMMITTED.read_text())


def _argv(data: dict, out: Path, *extra: str) -> list[str]:
    """The committed sweep's own arguments (past `.venv/bin/python benchmarks/goal_sweep.py`), reading the
    JSON and writing to `out`."""
    return [*shlex.split(data["command"])[2:], "--from-json", str(COMMITTED), "--out", str(out), *extra]


def test_from_json_reproduces_the_committed_answer_and_intervals_exactly(tmp_path):
    data = _committed()
    gs.main(_argv(data, tmp_path / "again"))
    got = json.loads((tmp_path / "again.json").read_text())
    for key in ANALYSIS:
        assert got[key] == data[key], key
    assert got["answer"]["value"] == 8 and got["answer"]["conclusive"] is True
    # the runs, their times and the machine are the committed sweep's, untouched
    for key in ("command", "config", "runs", "runs_wall_s", "machine"):
        assert got[key] == data[key], key
    assert "Analysed again from the runs recorded in" in (tmp_path / "again.md").read_text()


@pytest.mark.parametrize(
    "change",
    [
        ("--set", "swarm.training.lr=1e-4"),  # a later --set wins, as in `a3r research`
        ("--seeds", "100", "101", "102"),
        ("--budget", "alpha=0.1"),
    ],
)
def test_from_json_refuses_a_sweep_of_another_config(tmp_path, change):
    with pytest.raises(SystemExit, match="--from-json: .* is a sweep of another config"):
        gs.main(_argv(_committed(), tmp_path / "x", *change))
    assert not (tmp_path / "x.json").exists()


def test_from_json_refuses_a_statistic_the_rows_cannot_give(tmp_path):
    data = _committed()
    goal, budget = gs.parse_goal(data["config"]["goal"]), gs.ResearchBudget()
    runs = gs.plan(goal, gs.base_job(()), 8, data["config"]["seeds"], tmp_path, budget)
    q = replace(gs.sweep_question(goal, budget, {}), statistic="auc")
    with pytest.raises(ValueError, match="not the curve 'auc' needs"):
        gs.observations_from_rows(runs, data["runs"], q)


@pytest.mark.parametrize(
    ("answer", "conclusive", "outcome"),
    [
        (8, True, "match"),
        (2, True, "different answer"),
        (8, False, "cannot tell, sweep answers"),  # e.g. a campaign stopped before its confirmation
    ],
)
def test_campaign_report_is_compared_with_the_committed_sweep(tmp_path, answer, conclusive, outcome):
    data = _committed()
    report = tmp_path / "report.json"
    level = {"level": None, "answer": answer, "conclusive": conclusive, "verdict": "by hand"}
    report.write_text(
        json.dumps(
            {
                "goal": data["config"]["goal"],
                "answer": "hand-made",
                "conclusive": conclusive,
                "levels": [level],
            }
        )
    )
    gs.main(_argv(data, tmp_path / "cmp", "--campaign-report", str(report)))
    cmp = json.loads((tmp_path / "cmp.json").read_text())["campaign"]
    expected = gs.agreement({"value": 8}, {"value": answer if conclusive else None})
    assert expected["outcome"] == outcome
    assert [(le["sweep"], le["outcome"], le["match"]) for le in cmp["levels"]] == [
        (8, outcome, outcome == "match")
    ]
    assert cmp["match"] is (outcome == "match")
    assert f"**{outcome}**" in (tmp_path / "cmp.md").read_text()


def test_a_question_field_that_only_words_sentences_is_compared_only_when_recorded():
    """`Question.values` (added after the compare sweep was committed) names untested values in a verdict;
    a committed config without it is not another config, one that records other values is."""
    q = {"shape": "compare", "alpha": 0.05}
    planned = {"question": {**q, "values": [2, 8]}}
    assert gs.config_mismatch({"question": q}, planned) == []
    assert gs.config_mismatch({"question": {**q, "values": [2, 4]}}, planned) == ["question"]
    assert gs.config_mismatch({"question": {**q, "alpha": 0.1}}, planned) == ["question"]


MINIMUM_JSON = COMMITTED.with_name("real_goal_minimum.json")


def test_the_minimum_steps_page_names_no_single_step_count_and_its_plot_draws_the_fail_margin(tmp_path):
    """Issue 25: the committed minimum-steps page (arms of 1, 2, 4 and 8 steps) said "20 steps each", and its
    plot had no line for the fail margin (an arm fails when its gain is shown below 50% of 8 steps' gain).
    Analysed again from its JSON (nothing trains): the page says each arm trains its own count, and the
    figure's right panel has the margin at half the 8-step arm's mean gain, computed here from the rows."""
    data = json.loads(MINIMUM_JSON.read_text())
    argv = [*shlex.split(data["command"])[2:], "--from-json", str(MINIMUM_JSON), "--out", str(tmp_path / "m")]
    gs.main(argv)
    md = (tmp_path / "m.md").read_text()
    assert "each arm training its own step count (1, 2, 4, 8 steps)" in md and "20 steps" not in md
    got = json.loads((tmp_path / "m.json").read_text())
    for key in ANALYSIS:  # the numbers are the committed ones
        assert got[key] == data[key], key
    gains = [r["final"] - r["step0"] for r in data["runs"] if r["arm"] == "steps=8"]
    expected = 0.5 * sum(gains) / len(gains)
    fig = gs.sweep_figure(got)
    try:
        right = fig.axes[1]
        (line,) = [ln for ln in right.get_lines() if ln.get_label().startswith("fail margin")]
        assert list(line.get_ydata()) == pytest.approx([expected, expected])
        assert line.get_label() == f"fail margin: 50% of steps=8's gain, {gs.fmt(expected)}"
        assert line.get_label() in [t.get_text() for t in right.get_legend().get_texts()]
    finally:
        gs.plt.close(fig)
