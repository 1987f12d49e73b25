"""`swarm train` end to end on the tiny model: a real server subprocess, real task clients, real steps."""

from __future__ import annotations

import json
import shutil

import pytest
from tests_support import load_benchmark, run_swarm_train, swarm_train, tiny_train_job, train_command

from engine.training.metrics import read_eval_scores, read_run_metrics


def _metric_steps(run_dir):
    """(training steps, held-out evaluation steps) in the run dir's metrics.jsonl."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in lines if "eval_accuracy" not in r], [r["step"] for r in lines if "eval_accuracy" in r]


def _assert_ran_to(run_dir, steps: int) -> None:
    """A finished run of `steps` steps: its summary, a metrics row per step, held-out accuracy before and
    after training, and the last step's checkpoint."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_status"]["global_step"] == steps
    assert 0.0 <= summary["accuracy_before"] <= 1.0 and 0.0 <= summary["accuracy_after"] <= 1.0
    train_steps, evals = _metric_steps(run_dir)
    assert train_steps == list(range(1, steps + 1))
    assert evals == [0, steps]  # held-out accuracy before training and after the last step, as metric points
    assert (run_dir / "checkpoints" / "latest").read_text() == f"step-{steps:06d}"
    # each evaluation's per-item scores, in held-out order, average to its logged accuracy
    rows = {r["step"]: r for r in read_run_metrics(run_dir) if "eval_accuracy" in r}
    scores = read_eval_scores(run_dir)
    assert sorted(k for k, key in scores if key == "eval_accuracy") == [0, steps]
    for (k, _key), (ids, values) in scores.items():
        assert len(ids) == len(set(ids)) == len(values) == rows[k]["eval_items"]
        assert sum(values) / len(values) == pytest.approx(rows[k]["eval_accuracy"], abs=1e-12)


@pytest.mark.slow
@pytest.mark.timeout(600)  # the shared reference run counts into the first test to ask for it
def test_swarm_train_runs_to_max_steps_and_more_steps_resume(tmp_path, chaos_job_reference):
    """The arithmetic task's run is the session's undisturbed chaos-job run (4 steps); a copy of it given
    more steps continues from its checkpoint instead of starting over."""
    job = load_benchmark("chaos").JOB
    steps = job["swarm"]["training"]["max_steps"]
    _assert_ran_to(chaos_job_reference, steps)
    cmd, run_dir = train_command(tmp_path, job)
    shutil.copytree(chaos_job_reference, run_dir)  # the shared run stays as it is
    out = run_swarm_train(cmd + ["--steps", str(steps + 1)], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    train_steps, evals = _metric_steps(run_dir)
    assert train_steps == list(range(1, steps + 2))
    assert evals == [0, steps, steps + 1]  # a resumed job does not re-measure the untrained level


@pytest.mark.slow
def test_swarm_train_runs_the_calculator_task_to_max_steps(tmp_path):
    """The tool-calling task end to end (resuming is the same code path for every task: the test above)."""
    job = tiny_train_job(steps=2, eval_size=4, max_tokens=8, task="calculator", training={"lr": 1e-3})
    run_dir = swarm_train(tmp_path, job, timeout=300)
    _assert_ran_to(run_dir, 2)


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
