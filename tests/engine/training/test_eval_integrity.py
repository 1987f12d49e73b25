"""An evaluation is recorded only whole (issue 26, defect 4): `swarm train` whose server is SIGKILLed in
the middle of the "before" evaluation restarts it and measures that evaluation again, in full, logging
one row that counts its items; rerunning the finished run dir changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tests_support import child_pids

from engine.training.audit import audit_run_dir

EVAL_SIZE = 48


def _eval_rows(metrics: Path) -> list[dict]:
    if not metrics.exists():
        return []
    return [r for r in map(json.loads, metrics.read_text().splitlines()) if "eval_accuracy" in r]


@pytest.mark.slow
def test_an_evaluation_cut_short_by_a_killed_server_is_measured_again_in_full(tmp_path):
    job = {
        "task": "arithmetic",
        "eval_size": EVAL_SIZE,
        "max_tokens": 96,  # long random replies: the evaluation lasts seconds, long enough to be cut
        "concurrency": 4,
        "swarm": {
            "model": {"name": "tiny"},
            "pool": {"batch_size": 2, "group_size": 2},
            "training": {"max_steps": 1, "mini_batch_size": 4, "micro_batch_size": 2},
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    metrics = run_dir / "metrics.jsonl"
    cmd = [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir)]
    stderr = tmp_path / "stderr.txt"
    with open(stderr, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, env={**os.environ, "COLUMNS": "400"})
    try:
        deadline = time.monotonic() + 240
        while "server ROLLING at step 0" not in stderr.read_text():
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server never rolled"
            time.sleep(0.02)
        time.sleep(1.0)  # the "before" evaluation's episodes are under way
        assert _eval_rows(metrics) == [], "the evaluation finished before the kill: lengthen it"
        (server_pid,) = child_pids(proc.pid)
        os.kill(server_pid, signal.SIGKILL)
        proc.wait(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = stderr.read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "restarting it from the last checkpoint" in err
    rows = _eval_rows(metrics)
    # One "before" row (step 0), measured on every item after the restart, and one "after" row.
    assert [(r["step"], r["eval_items"]) for r in rows] == [(0, EVAL_SIZE), (1, EVAL_SIZE)], rows
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["accuracy_before"] == rows[0]["eval_accuracy"]
    report = audit_run_dir(run_dir, eval_items=EVAL_SIZE)
    assert report.ok and report.checked["evaluations"] == 2, report.as_dict()
    # A finished run dir run again: nothing evaluated again, no second final row.
    before = metrics.read_text()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "400"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished" in again.stderr and metrics.read_text() == before


@pytest.mark.slow
def test_a_job_killed_between_its_final_evaluation_and_its_summary_does_not_evaluate_again(tmp_path):
    """The state a SIGKILL leaves between the final `eval_accuracy` row and summary.json (the window is
    too short to hit reliably): the run dir as a finished job leaves it, less its summary. The rerun
    resumes the final checkpoint, reuses the recorded final accuracy, and logs no second final row."""
    job = {
        "task": "arithmetic",
        "eval_size": 4,
        "max_tokens": 6,
        "concurrency": 4,
        "swarm": {
            "model": {"name": "tiny"},
            "pool": {"batch_size": 2, "group_size": 2},
            "training": {"max_steps": 1, "mini_batch_size": 4, "micro_batch_size": 2},
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").unlink()  # killed after the final row, before the summary was written

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "400"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "was recorded before an interruption" in again.stderr
    rows = _eval_rows(run_dir / "metrics.jsonl")
    assert [(r["step"], r["eval_items"]) for r in rows] == [(0, 4), (1, 4)], rows
    rerun = json.loads((run_dir / "summary.json").read_text())
    assert rerun["accuracy_after"] == summary["accuracy_after"] == rows[1]["eval_accuracy"]
    assert audit_run_dir(run_dir, eval_items=4).ok
