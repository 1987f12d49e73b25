"""benchmarks/goal_sweep.py runs its runs in slots, as A3R does on a CPU host: each run in a child process with
its slot's CPU threads, several at once. Real sweeps of the `tiny` model (1 step, 4 held-out items), real
child processes and servers; nothing depends on the machine's speed (generous timeouts, no timing claims)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from tests_support import load_benchmark

gs = load_benchmark("goal_sweep")

GOAL = "Does batch size 2 or 4 train arithmetic better in 1 steps?"
# run_cost's smoke run (tiny, 1 step, 4 held-out items), less the batch size the goal studies
SETTINGS = [
    "swarm.model.name=tiny",
    "swarm.pool.group_size=2",
    "swarm.training.micro_batch_size=2",
    "eval_size=4",
    "max_tokens=4",
    "concurrency=4",
]


def _sweep(tmp_path, *extra: str) -> dict:
    argv = [GOAL, *(a for s in SETTINGS for a in ("--set", s)), "--seeds", "0"]
    gs.main([*argv, "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), *extra])
    return json.loads((tmp_path / "out.json").read_text())


def _records(tmp_path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "runs").glob(f"*/{gs.RUN_RECORD}")}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_runs_train_at_once_each_with_one_thread(tmp_path):
    result = _sweep(tmp_path, "--slots", "2")
    assert result["slots"] == 2 and result["threads"] == 1
    rows = result["runs"]
    assert [r["arm"] for r in rows] == ["bs=2", "bs=4"]
    for row in rows:
        # the slot's setting, and what the run's server reported computing with (/health's torch_threads)
        assert row["threads"] == 1 and row["torch_threads"] == 1
        summary = json.loads((tmp_path / "runs" / f"{row['arm'].replace('=', '')}-seed0/summary.json").read_text())
        assert summary["torch_threads"] == 1
    a, b = _records(tmp_path).values()
    # both trained in the same interval of time: each started before the other ended
    assert a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]
    assert "2 at a time with 1 thread(s) each" in (tmp_path / "out.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_finished_runs_are_reused_and_a_partial_run_starts_over(tmp_path, capsys):
    first = _sweep(tmp_path, "--slots", "1")  # one run at a time with both cores
    assert [r["threads"] for r in first["runs"]] == [2, 2]
    kept, partial = tmp_path / "runs/bs2-seed0", tmp_path / "runs/bs4-seed0"
    kept_metrics = (kept / "metrics.jsonl").read_bytes()
    kept_record = json.loads((kept / gs.RUN_RECORD).read_text())
    (partial / "summary.json").unlink()  # as if the sweep had been stopped while it trained
    (partial / "stale.txt").write_text("left by the interrupted run")
    capsys.readouterr()
    again = _sweep(tmp_path, "--slots", "2")
    out = capsys.readouterr().out
    assert "[1/2] bs=2 seed 0: reused" in out and "started bs=4 seed 0" in out and "started bs=2" not in out
    assert (kept / "metrics.jsonl").read_bytes() == kept_metrics
    assert json.loads((kept / gs.RUN_RECORD).read_text()) == kept_record
    assert not (partial / "stale.txt").exists() and (partial / "summary.json").exists()
    # the reused run keeps its thread count; the page says the sweep mixes two
    assert [(r["threads"], r["torch_threads"]) for r in again["runs"]] == [(2, 2), (1, 1)]
    assert "different thread counts (1, 2" in (tmp_path / "out.md").read_text()
    # the sweep's wall spans every run's record, the reused one's included (not only this invocation's)
    recs = _records(tmp_path).values()
    span = max(r["finished_at"] for r in recs) - min(r["started_at"] for r in recs)
    assert again["span_wall_s"] == pytest.approx(span) and span > again["sweep_wall_s"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_failed_run_is_reported_with_its_dir_and_the_other_finishes(tmp_path):
    goal = gs.parse_goal(GOAL)
    good, bad = gs.plan(goal, gs.base_job(SETTINGS), 1, [0], tmp_path / "runs")
    empty = tmp_path / "not-a-model"  # a model directory without a model: its server cannot load it
    empty.mkdir()
    job = gs.deep_merge(bad.job, {"swarm": {"model": {"name": str(empty)}}})
    bad = replace(bad, job=job)
    with pytest.raises(gs.RunFailed) as err:
        gs.execute_all([bad, good], slots=2, threads=1)  # the failing one first: the other still runs
    message = str(err.value)
    assert "bs=4 seed 0 failed" in message and str(bad.run_dir) in message
    assert "Run the same command again" in message and "1 of 2 runs failed" in message
    assert good.done and not bad.done
    assert json.loads((good.run_dir / "summary.json").read_text())["torch_threads"] == 1
    shutil.rmtree(tmp_path / "runs")
