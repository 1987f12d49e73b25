"""`swarm serve` and `swarm train` answer bad set-ups with one message, never a traceback (issue 26,
defect 6): a run dir it cannot write, a token given by the environment (never written to a file), and a
backend that is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
from tests_support import free_port

READ_ONLY = "/sys/swarm-test-run"  # sysfs: no one may create a directory there, root included


def _swarm(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_an_unwritable_run_dir_is_one_message(tmp_path):
    out = _swarm("serve", "--run-dir", READ_ONLY, "--port", str(free_port()))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.startswith(f"swarm: {READ_ONLY}") and "writable --run-dir" in out.stderr
    (tmp_path / "job.yaml").write_text("task: arithmetic\nswarm: {model: {name: tiny}, training: {max_steps: 1}}\n")
    out = _swarm("train", "--config", str(tmp_path / "job.yaml"), "--run-dir", READ_ONLY)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "writable --run-dir" in out.stderr


def _serve_until(args: list[str], env: dict, ready) -> str:
    """Run `swarm serve ARGS` until `ready(stderr so far, port)` holds; return its stderr."""
    port = free_port()
    err = open(os.devnull, "w")  # noqa: SIM115 - closed below
    log = f"/tmp/swarm-serve-{port}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "serve", "--port", str(port), *args], stderr=f, stdout=err, env=env)
    try:
        deadline = time.monotonic() + 180
        while not ready(open(log).read(), port):
            assert proc.poll() is None, open(log).read()[-2000:]
            assert time.monotonic() < deadline, open(log).read()[-2000:]
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        err.close()
    text = open(log).read()
    os.unlink(log)
    return text


def test_a_token_from_the_environment_is_not_said_to_be_in_a_file(tmp_path):
    env = {**os.environ, "SWARM_ADMIN_TOKEN": "sk-admin-from-env-" + "y" * 20}
    text = _serve_until(["--run-dir", str(tmp_path / "run")], env, lambda t, _: "swarm server on" in t)
    assert "admin token in $SWARM_ADMIN_TOKEN" in text
    assert not (tmp_path / "run" / "admin_token").exists()


def _boot_failed(_: str, port: int) -> bool:
    try:
        return "boot failed" in str(httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json().get("error"))
    except httpx.HTTPError:
        return False


def test_a_backend_that_is_not_installed_is_one_message_not_a_trace(tmp_path):
    cfg = tmp_path / "verl.yaml"
    cfg.write_text("backend: verl\nmodel: {name: tiny}\n")
    env = {**os.environ, "SWARM_ADMIN_TOKEN": "sk-admin-from-env-" + "y" * 20}
    text = _serve_until(["--config", str(cfg), "--start", "--run-dir", str(tmp_path / "run")], env, _boot_failed)
    assert "boot failed" in text and "verl" in text
    assert "Traceback" not in text, text[-3000:]
