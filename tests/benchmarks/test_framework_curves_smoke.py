"""benchmarks/framework_curves.py end to end on the tiny model (one seed, three client stacks, 2 steps, a
4-item held-out set), with a difference planted in one stack: the unplanted stack's curves must coincide
with the reference's bit for bit (batch-invariant decoding), the planted one must be reported, and the
JSON, Markdown and PNG must be written. Plus the pure helpers on hand-made series. Never timing."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from tests_support import load_benchmark

fc = load_benchmark("framework_curves")
REPO = Path(__file__).resolve().parents[2]


def test_step_series_keeps_training_numbers_and_drops_the_machine():
    rows = [
        {"step": 0, "eval_accuracy": 0.25, "eval_items": 4},
        {"step": 1.0, "reward_mean": 0.5, "reward_std": 0.1, "train_time_s": 3.0, "step_time_s": 1.0, "ok": True},
        {"no_step": 1.0},
        {"step": 1, "reward_mean": 0.75},  # a later record of a step wins
    ]
    assert fc.step_series(rows) == {
        "eval_accuracy": {0: 0.25}, "eval_items": {0: 4.0}, "reward_mean": {1: 0.75}, "reward_std": {1: 0.1},
    }


def test_differences_and_summary_find_the_largest_gap_and_missing_steps():
    ref = {"reward_mean": {1: 0.5, 2: 0.5}, "eval_accuracy": {0: 0.1}}
    same = {"reward_mean": {1: 0.5, 2: 0.5}, "eval_accuracy": {0: 0.1}}
    off = {"reward_mean": {1: 0.5, 2: 0.54}, "eval_accuracy": {0: 0.1, 2: 0.3}}
    d = fc.differences({"openai": ref, "httpx": same, "langgraph": off}, "openai")
    assert d["reward_mean"]["httpx"]["max"] == 0 and d["reward_mean"]["langgraph"]["max"] == pytest.approx(0.04)
    assert d["eval_accuracy"]["langgraph"]["missing_steps"] == [2]
    s = fc.summarize({0: d})
    assert s["reward_mean"]["where"] == {"seed": 0, "stack": "langgraph", "step": 2}
    assert not s["reward_mean"]["within_paper"]  # 0.04 > 0.025
    assert s["eval_accuracy"]["max"] == 0 and not s["eval_accuracy"]["within_paper"]  # a step only one side logged


def test_a_nan_gap_is_zero_only_when_both_are_nan():
    assert fc._gap(math.nan, math.nan) == 0.0
    assert fc._gap(math.nan, 1.0) == math.inf and fc._gap(0.25, 0.5) == 0.25


def test_plant_spec_is_parsed_or_refused():
    assert fc.parse_plant("httpx:seed=3") == ("httpx", "seed", 3.0)
    for bad in ("nope:seed=1", "httpx:lr=1", "httpx:seed=", "httpx"):
        with pytest.raises(ValueError):
            fc.parse_plant(bad)


@pytest.mark.slow
@pytest.mark.timeout(900)  # real servers and training: 168-302 s in a suite beside a 2-slot sweep on 2 cores; 300 s cut one
def test_smoke_run_coincides_across_stacks_and_reports_a_planted_difference(tmp_path):
    out = tmp_path / "fc"
    cmd = [
        sys.executable, str(REPO / "benchmarks" / "framework_curves.py"), "--model", "tiny", "--seeds", "0",
        "--stacks", "openai", "langgraph", "httpx", "--steps", "2", "--batch", "2", "--group", "2",
        "--eval-size", "4", "--eval-every", "1", "--max-tokens", "4", "--plant", "httpx:seed=7",
        "--out", str(out), "--runs", str(tmp_path / "runs"),
    ]
    # Generous: three tiny runs with their server subprocesses on a loaded 2-core machine.
    subprocess.run(cmd, check=True, cwd=tmp_path, timeout=1200, capture_output=True)
    report = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".png").stat().st_size > 0
    page = out.with_suffix(".md").read_text()
    assert "httpx:seed=7" in page and "| reward_mean |" in page and "| eval_accuracy |" in page

    diffs = report["differences"]["0"]
    # Every stack logged the curves the paper compares at every step: before training, steps 1 and 2.
    for run in report["runs"]:
        assert sorted(run["series"]["eval_accuracy"]) == ["0", "1", "2"]
        assert sorted(run["series"]["reward_mean"]) == ["1", "2"]
    # LangGraph plays the same job as the OpenAI SDK: every training metric coincides at every step.
    assert {"entropy", "tokens", "reward_mean", "eval_accuracy"} <= set(diffs)
    for metric, stacks in diffs.items():
        assert stacks["langgraph"]["max"] == 0 and stacks["langgraph"]["missing_steps"] == [], metric
    # httpx trained other problems (seed 7): the difference is there and the summary names it.
    planted = {m: s["httpx"]["max"] for m, s in diffs.items()}
    assert planted["entropy"] > 0
    worst = max(report["summary"].values(), key=lambda s: s["max"])
    assert worst["where"]["stack"] == "httpx" and worst["max"] > fc.PAPER_TOLERANCE and not worst["within_paper"]
