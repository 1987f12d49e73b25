"""`swarm train` owns its server: SIGKILLed mid-run, the server is restarted and resumes from its last
checkpoint, and the steps trained again replace their metrics instead of repeating them; a server that
keeps dying ends the command with a clear message naming its log and how to resume, not a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests_support import BackgroundTrain, child_pids, tiny_train_job

from engine.training.metrics import MetricsLog


def _steps(metrics: Path) -> list[int]:
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [int(r["step"]) for r in records if "eval_accuracy" not in r]  # the server's per-step records


def _train_and_kill_once(tmp_path: Path, after_step_1: bool = True, **job_overrides) -> tuple[BackgroundTrain, str]:
    """Run `swarm train`, SIGKILL its server right after step 1's metrics appear (or as soon as it is
    rolling), and wait for the command."""
    # checkpoint every 2 steps: step 1 is trained but not durable when the server dies
    job = tiny_train_job(steps=3, training={"checkpoint_every": 2}, **job_overrides)
    with BackgroundTrain(tmp_path, job) as train:
        if after_step_1:
            train.wait_until(lambda: bool(train.metrics_text().strip()), "a training step")
        else:
            train.wait_until(lambda: "server ROLLING" in train.stderr(), "the server rolling")
        train.kill_server()
        err = train.wait(timeout=240)
    return train, err


@pytest.mark.slow
@pytest.mark.timeout(900)  # real servers and training: 168-302 s in a suite beside a 2-slot sweep on 2 cores; 300 s cut one
def test_a_killed_server_is_restarted_and_retrained_steps_replace_their_metrics(tmp_path):
    """Two kills in one job: first while the server still starts (before /health answers: found by the
    chaos benchmark, this ended `swarm train` with a RuntimeError traceback instead of a restart), then
    right after step 1's metrics, before any checkpoint."""
    job = tiny_train_job(steps=3, training={"checkpoint_every": 2})
    with BackgroundTrain(tmp_path, job) as train:
        # the server's process exists; it imports torch for seconds yet
        train.wait_until(lambda: bool(child_pids(train.proc.pid)), "a server started", poll_s=0.005)
        assert "server ROLLING" not in train.stderr()
        train.kill_server()
        train.wait_until(lambda: bool(train.metrics_text().strip()), "a training step")
        train.kill_server()
        err = train.wait(timeout=240)
    assert train.proc.returncode == 0, err[-3000:]
    assert "restarting it from the last checkpoint (restart 1 of at most 3" in err
    assert "restarting it from the last checkpoint (restart 2 of at most 3" in err
    # Resumed from the beginning (no checkpoint yet), so step 1 was trained twice: it is logged once. The
    # restarted server replays its journal as it starts, so it may have retrained step 1 from the replayed
    # episodes before the job first asks its step: 0 or 1, never the checkpoint's 2. The first server
    # never rolled.
    rolling = [int(s) for s in re.findall(r"server ROLLING at step (\d+)", err)]
    assert len(rolling) == 2 and rolling[0] == 0 and rolling[1] in (0, 1), err[-3000:]
    assert _steps(train.run_dir / "metrics.jsonl") == [1, 2, 3]
    assert json.loads((train.run_dir / "summary.json").read_text())["max_steps"] == 3
    assert "Traceback" not in err


@pytest.mark.slow
def test_a3r_checkpoint_policy_recovers_a_killed_server_and_leaves_no_checkpoint(tmp_path):
    """A3R's default policy (at most one checkpoint per 120 s, none at the end, all deleted on success):
    a server killed after step 1 has nothing durable, restarts from the model and its journal, finishes."""
    swarm = tiny_train_job(steps=3, training={"checkpoint_every": 1, "checkpoint_every_s": 120.0})["swarm"]
    train, err = _train_and_kill_once(tmp_path, swarm=swarm, keep_final_checkpoint=False)
    assert train.proc.returncode == 0, err[-3000:]
    assert "restarting it from the last checkpoint (restart 1 of at most 3" in err
    rolling = [int(s) for s in re.findall(r"server ROLLING at step (\d+)", err)]
    assert len(rolling) == 2 and rolling[0] == 0 and rolling[1] in (0, 1), err[-3000:]
    assert _steps(train.run_dir / "metrics.jsonl") == [1, 2, 3]
    assert not (train.run_dir / "checkpoints").exists() and "Traceback" not in err


@pytest.mark.slow
def test_a_server_that_keeps_dying_ends_swarm_train_with_a_clear_message(tmp_path):
    train, err = _train_and_kill_once(tmp_path, after_step_1=False, max_server_restarts=0)
    assert train.proc.returncode == 1, err[-3000:]
    assert "swarm train: the training server exited with code -9" in err
    assert f"--run-dir {train.run_dir}" in err and str(train.run_dir / "server.log") in err
    assert "Traceback" not in err


def test_supersede_drops_only_records_after_the_resumed_step(tmp_path, monkeypatch):
    monkeypatch.delenv("A3R_METRICS_FILE", raising=False)
    log = MetricsLog(tmp_path)
    for rec in [{"step": 0, "eval_accuracy": 0.1}, {"step": 1, "pg_loss": 0.5}, {"step": 2.0, "pg_loss": 0.4},
                {"step": 2, "eval_accuracy": 0.3}, {"step": 3, "pg_loss": 0.2}]:
        log.write(rec)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write("not json\n")  # not ours to judge: kept
    assert log.supersede_after(1) == 3
    kept = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert kept == ['{"step": 0, "eval_accuracy": 0.1}', '{"step": 1, "pg_loss": 0.5}', "not json"]
    assert log.supersede_after(1) == 0
    # A3R's file is tailed by byte offset: never rewritten, even when it is the only one
    a3r_file = tmp_path / "a3r" / "metrics.jsonl"
    monkeypatch.setenv("A3R_METRICS_FILE", str(a3r_file))
    a3r_only = MetricsLog(None)
    a3r_only.write({"step": 5, "pg_loss": 0.1})
    assert a3r_only.supersede_after(0) == 0 and a3r_file.read_text() == '{"step": 5, "pg_loss": 0.1}\n'
