"""`swarm train` end to end on the tiny model: a real server subprocess, real task clients, real steps."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml


def _metric_steps(run_dir):
    """(training steps, held-out evaluation steps) in the run dir's metrics.jsonl."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in lines if "eval_accuracy" not in r], [r["step"] for r in lines if "eval_accuracy" in r]


@pytest.mark.parametrize("task", ["arithmetic", "calculator"])
def test_swarm_train_runs_to_max_steps_and_resumes(tmp_path, task):
    job = {
        "task": task,
        "eval_size": 4,
        "max_tokens": 8,
        "concurrency": 4,
        "swarm": {
            "model": {"name": "tiny"},
            "pool": {"batch_size": 2, "group_size": 2},
            "training": {"max_steps": 2, "lr": 1e-3, "mini_batch_size": 4, "micro_batch_size": 2},
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_status"]["global_step"] == 2
    assert 0.0 <= summary["accuracy_before"] <= 1.0 and 0.0 <= summary["accuracy_after"] <= 1.0
    steps, evals = _metric_steps(run_dir)
    assert steps == [1.0, 2.0]
    assert evals == [0, 2]  # held-out accuracy before training and after the last step, as metric points
    assert (run_dir / "checkpoints" / "latest").read_text() == "step-000002"
    # more steps on the same run dir continue from the checkpoint instead of starting over
    out = subprocess.run(cmd + ["--steps", "3"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    steps, evals = _metric_steps(run_dir)
    assert steps == [1.0, 2.0, 3.0]
    assert evals == [0, 2, 3]  # a resumed job does not re-measure the untrained level


def test_a_problem_drawn_twice_in_one_step_is_two_groups(tmp_path, monkeypatch):
    """Task ids carry the batch position: the same problem twice in a step must still give B complete
    groups of N (one group of 2N would never complete under task_count and the job would hang)."""
    from engine.config import SwarmConfig
    from engine.jobs import TrainJob
    from engine.launch import train
    from engine.tasks.arithmetic import Arithmetic

    original = Arithmetic.dataset
    twice_impl = lambda self, n, seed: [original(self, 1, seed)[0]] * n  # noqa: E731
    monkeypatch.setattr(Arithmetic, "dataset", twice_impl)
    job = TrainJob(
        task="arithmetic",
        eval_size=0,
        max_tokens=4,
        concurrency=4,
        swarm=SwarmConfig(
            model={"name": "tiny"},
            pool={"policy": "task_count", "batch_size": 2, "group_size": 2},
            training={"max_steps": 1, "mini_batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 0},
        ),
    )
    summary = train(job, tmp_path / "run")
    assert summary["final_status"]["global_step"] == 1
    assert summary["final_status"]["pool"]["episodes"] == 0


def test_a_finished_job_can_drop_its_checkpoints(tmp_path):
    """Sweeps set keep_final_checkpoint: false: the results stay, the gigabytes of weights do not."""
    from engine.config import SwarmConfig
    from engine.jobs import TrainJob
    from engine.launch import train

    job = TrainJob(
        task="arithmetic",
        eval_size=0,
        max_tokens=4,
        concurrency=4,
        keep_final_checkpoint=False,
        swarm=SwarmConfig(
            model={"name": "tiny"},
            pool={"batch_size": 2, "group_size": 2},
            training={"max_steps": 2, "mini_batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 1},
        ),
    )
    run = tmp_path / "run"
    assert train(job, run)["final_status"]["global_step"] == 2
    assert not (run / "checkpoints").exists()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2 and (run / "summary.json").exists()
