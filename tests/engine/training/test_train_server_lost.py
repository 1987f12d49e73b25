"""`swarm train` owns its server: SIGKILLed mid-run, the server is restarted and resumes from its last
checkpoint, and the steps trained again replace their metrics instead of repeating them; a server that
keeps dying ends the command with a clear message naming its log and how to resume, not a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tests_support import child_pids

from engine.training.metrics import MetricsLog


def _steps(metrics: Path) -> list[int]:
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [int(r["step"]) for r in records if "eval_accuracy" not in r]  # the server's per-step records


def _train_and_kill_once(tmp_path: Path, after_step_1: bool = True, **job_overrides) -> tuple[subprocess.Popen, Path, str]:
    """Run `swarm train`, SIGKILL its server right after step 1's metrics appear (or as soon as it is
    rolling), and wait for the command."""
    job = {
        "task": "arithmetic",
        "eval_size": 0,
        "max_tokens": 4,
        "concurrency": 4,
        "swarm": {
            "model": {"name": "tiny"},
            "pool": {"batch_size": 2, "group_size": 2},
            # checkpoint every 2 steps: step 1 is trained but not durable when the server dies
            "training": {"max_steps": 3, "mini_batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 2},
        },
        **job_overrides,
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir)]
    stderr = tmp_path / "stderr.txt"  # a file, not a pipe: nobody reads a pipe while the job runs
    with open(stderr, "w") as err_file:
        # wide enough that rich does not wrap the job's messages
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, env={**os.environ, "COLUMNS": "400"})
    try:
        metrics = run_dir / "metrics.jsonl"

        def reached() -> bool:
            if after_step_1:
                return metrics.exists() and bool(metrics.read_text().strip())
            return "server ROLLING" in stderr.read_text()

        deadline = time.monotonic() + 240
        while not reached():
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, "no training step within 240 s"
            time.sleep(0.02)
        (server_pid,) = child_pids(proc.pid)
        os.kill(server_pid, signal.SIGKILL)
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, run_dir, stderr.read_text()


@pytest.mark.slow
def test_a_killed_server_is_restarted_and_retrained_steps_replace_their_metrics(tmp_path):
    proc, run_dir, err = _train_and_kill_once(tmp_path)
    assert proc.returncode == 0, err[-3000:]
    assert "restarting it from the last checkpoint (restart 1 of at most 3" in err
    # Resumed from the beginning (no checkpoint yet), so step 1 was trained twice: it is logged once. The
    # restarted server replays its journal as it starts, so it may have retrained step 1 from the replayed
    # episodes before the job first asks its step: 0 or 1, never the checkpoint's 2.
    rolling = [int(s) for s in re.findall(r"server ROLLING at step (\d+)", err)]
    assert len(rolling) == 2 and rolling[0] == 0 and rolling[1] in (0, 1), err[-3000:]
    assert _steps(run_dir / "metrics.jsonl") == [1, 2, 3]
    assert json.loads((run_dir / "summary.json").read_text())["max_steps"] == 3
    assert "Traceback" not in err


@pytest.mark.slow
def test_a3r_checkpoint_policy_recovers_a_killed_server_and_leaves_no_checkpoint(tmp_path):
    """A3R's default policy (at most one checkpoint per 120 s, none at the end, all deleted on success):
    a server killed after step 1 has nothing durable, restarts from the model and its journal, finishes."""
    swarm = {
        "model": {"name": "tiny"},
        "pool": {"batch_size": 2, "group_size": 2},
        "training": {
            "max_steps": 3, "mini_batch_size": 4, "micro_batch_size": 2,
            "checkpoint_every": 1, "checkpoint_every_s": 120.0,
        },
    }
    proc, run_dir, err = _train_and_kill_once(tmp_path, swarm=swarm, keep_final_checkpoint=False)
    assert proc.returncode == 0, err[-3000:]
    assert "restarting it from the last checkpoint (restart 1 of at most 3" in err
    rolling = [int(s) for s in re.findall(r"server ROLLING at step (\d+)", err)]
    assert len(rolling) == 2 and rolling[0] == 0 and rolling[1] in (0, 1), err[-3000:]
    assert _steps(run_dir / "metrics.jsonl") == [1, 2, 3]
    assert not (run_dir / "checkpoints").exists() and "Traceback" not in err


@pytest.mark.slow
def test_a_server_that_keeps_dying_ends_swarm_train_with_a_clear_message(tmp_path):
    proc, run_dir, err = _train_and_kill_once(tmp_path, after_step_1=False, max_server_restarts=0)
    assert proc.returncode == 1, err[-3000:]
    assert "swarm train: the training server exited with code -9" in err
    assert f"--run-dir {run_dir}" in err and str(run_dir / "server.log") in err
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


@pytest.mark.slow
def test_a_server_killed_before_it_is_healthy_is_restarted(tmp_path):
    """Found by the chaos benchmark: a server SIGKILLed while it still starts (before /health answers)
    ended `swarm train` with a RuntimeError traceback instead of a restart."""
    job = {
        "task": "arithmetic", "eval_size": 0, "max_tokens": 4, "concurrency": 4,
        "swarm": {
            "model": {"name": "tiny"},
            "pool": {"batch_size": 2, "group_size": 2},
            "training": {"max_steps": 1, "mini_batch_size": 4, "micro_batch_size": 2},
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir)]
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, env={**os.environ, "COLUMNS": "400"})
    try:
        deadline = time.monotonic() + 240
        while not child_pids(proc.pid):  # the server's process exists; it imports torch for seconds yet
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, "no server started within 240 s"
            time.sleep(0.005)
        assert "server ROLLING" not in stderr.read_text()
        (server_pid,) = child_pids(proc.pid)
        os.kill(server_pid, signal.SIGKILL)
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = stderr.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "restarting it from the last checkpoint" in err
    assert _steps(run_dir / "metrics.jsonl") == [1]
