"""benchmarks/werewolf.py runs end to end on the tiny model (2 seeds, both arms, one step each), so the
script that compares shared and non-shared parameters cannot rot unnoticed; and its summary finds a
planted gain and no gain where none was planted. Checks structure and statistics, never speed."""

from __future__ import annotations

import json

import pytest
from tests_support import load_benchmark

ww = load_benchmark("werewolf")


def _run(arm: str, seed: int, win: float) -> dict:
    return {"arm": arm, "seed": seed, "after": {"win_rate": win, "seer_finds_per_game": 0.5,
                                                "invalid_rate": {"werewolf": 0.5, "seer": 0.25, "villager": None}}}


def test_the_summary_catches_a_planted_gain_and_not_an_absent_one():
    baseline = {"win_rate": 0.25, "invalid_rate": {"werewolf": 0.5, "seer": 0.5, "villager": 0.5}}
    planted = [0.55, 0.6, 0.5, 0.65, 0.6]  # the shared arm gains ~0.33 on every seed
    noise = [0.3, 0.2, 0.25, 0.3, 0.2]  # the non-shared arm: the baseline, give or take
    runs = [_run("shared", k, w) for k, w in enumerate(planted)] + [_run("non-shared", k, w) for k, w in enumerate(noise)]
    s = ww.summarise(runs, baseline)
    shared, non_shared = s["gain_over_baseline"]["shared"], s["gain_over_baseline"]["non-shared"]
    assert shared["lo"] > 0 and shared["mean"] == pytest.approx(0.33)
    assert non_shared["lo"] < 0 < non_shared["hi"]  # no gain planted: the interval keeps 0
    assert s["shared_minus_non_shared"]["lo"] > 0 and s["shared_minus_non_shared"]["n"] == 5
    assert s["invalid_rate_by_role"]["shared"] == {"werewolf": 0.5, "seer": 0.25, "villager": None}


@pytest.mark.slow
def test_smoke_run_trains_both_arms_and_writes_the_page(tmp_path, in_process):
    """In-process servers (the script's default is `swarm serve` subprocesses: the same API, slower to start)."""
    out = tmp_path / "werewolf"
    result = ww.main(["--smoke", "--out", str(out), "--work", str(tmp_path / "runs")], in_process)
    assert json.loads(out.with_suffix(".json").read_text())["args"]["model"] == "tiny"
    assert sorted((r["arm"], r["seed"]) for r in result["runs"]) == [
        ("non-shared", 0), ("non-shared", 1), ("shared", 0), ("shared", 1)]
    for r in result["runs"]:
        assert len(r["train_win_rate"]) == 1 and r["after"]["games"] == 2 and 0 <= r["after"]["win_rate"] <= 1
    assert result["baseline"]["games"] == 2
    assert result["summary"]["gain_over_baseline"]["shared"]["n"] == 2
    text = out.with_suffix(".md").read_text()
    assert "shared - non-shared" in text and "| seer |" in text


def test_a_flag_given_beside_smoke_wins_over_the_smokes_setting():
    args = ww.parse_args(["--smoke", "--lr", "2e-3", "--seeds", "3"])
    assert (args.model, args.lr, args.seeds, args.steps) == ("tiny", 2e-3, 3, 1)
    assert ww.parse_args(["--smoke"]).lr == 1e-3
