"""`swarm train` whose server is SIGKILLed mid-run: the command ends with a clear message naming the
server log and how to resume, not an httpx traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


@pytest.mark.slow
def test_a_killed_server_ends_swarm_train_with_a_clear_message(tmp_path):
    job = {
        "task": "arithmetic",
        "eval_size": 0,
        "max_tokens": 4,
        "concurrency": 4,
        "swarm": {
            "model": {"name": "tiny"},
            "pool": {"batch_size": 2, "group_size": 2},
            "training": {"max_steps": 50, "mini_batch_size": 4, "micro_batch_size": 2},
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir)]
    stderr = tmp_path / "stderr.txt"  # a file, not a pipe: nobody reads a pipe while the job runs
    with open(stderr, "w") as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file)
    try:
        # Kill the server once it has trained a step: the client is then mid-run.
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text().strip()):
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, "no training step within 240 s"
            time.sleep(0.2)
        (server_pid,) = _children(proc.pid)
        os.kill(server_pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = stderr.read_text()
    assert proc.returncode == 1, err[-3000:]
    assert "lost the connection to the training server" in err
    assert f"--run-dir {run_dir}" in err and str(run_dir / "server.log") in err
    assert "Traceback" not in err
