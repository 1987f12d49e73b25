"""Fault tolerance: a client SIGKILLed mid-episode leaves the server rolling and the pool clean; boots
that fail report why; a job's server never outlives its job or a failed start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest
from tests_support import ADMIN_TOKEN, free_port

from engine.config import SwarmConfig
from engine.errors import ConfigError, SwarmError
from engine.jobs import ServerProcess
from engine.server.app import create_app
from engine.server.core import SwarmServer
from engine.server.serve import default_backend_factory, resolve_admin_token

CLIENT = textwrap.dedent(
    """
    import sys, time
    from engine.client import SwarmClient
    c = SwarmClient(sys.argv[1], admin_token=sys.argv[2], client_id="doomed")
    ep = c.begin_episode("doomed-task")
    ep.openai().chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    print("CALLED", flush=True)
    time.sleep(600)
    """
)


def test_client_killed_mid_episode(live_server):
    # The idle deadline is long while the client lives, however slowly a loaded machine starts it (a 3 s deadline
    # once expired the episode while the client was still importing the OpenAI SDK). Once the client is dead the
    # test shortens the deadline to zero: the episode has then been idle longer than any deadline, and the sweep
    # (at most every second) must expire it. Assigning the float is atomic; the sweep reads it on its next pass.
    srv = live_server(SwarmConfig(episodes={"idle_timeout_s": 600.0}))
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, srv.url, ADMIN_TOKEN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "CALLED"
        with srv.client() as c:
            assert c.status()["episodes_live"] == 1
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            srv.server.episodes.idle_timeout_s = 0.0
            deadline = time.monotonic() + 30
            while c.status()["episodes_live"] and time.monotonic() < deadline:
                time.sleep(0.1)
            st = c.status()
            assert st["state"] == "ROLLING"
            assert st["episodes_live"] == 0 and st["episode_counts"]["expired"] == 1
            assert st["pool"]["episodes"] == 0
            # the server keeps serving other clients (with the long deadline back, so this one cannot idle out)
            srv.server.episodes.idle_timeout_s = 600.0
            with c.episode("after") as ep:
                ep.openai().chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
                assert ep.end(1.0).accepted
    finally:
        if proc.poll() is None:
            proc.kill()


JOB = textwrap.dedent(
    """
    import sys, time
    from engine.jobs import ServerProcess
    srv = ServerProcess(None, health_timeout_s=600)  # a loaded machine may take minutes; returns when up
    print(srv.proc.pid, flush=True)
    time.sleep(600)
    """
)


def test_a_jobs_server_exits_when_the_job_is_killed(tmp_path):
    """SIGKILL on a job (no cleanup runs) must not leave its server behind, training into its run dir."""
    job = subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    server_pid = None
    try:
        server_pid = int(job.stdout.readline())
        os.kill(server_pid, 0)  # alive while the job is
        os.kill(job.pid, signal.SIGKILL)
        job.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"server {server_pid} outlived its job by 30 s")
    finally:
        if job.poll() is None:
            job.kill()
        if server_pid is not None:
            try:
                os.kill(server_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _blocked_run_dir(tmp_path):
    # A regular file where a parent directory should be: mkdir fails for every user, root included
    # (root ignores permission bits, so chmod cannot make a directory unwritable here).
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    return blocker / "run", "blocker/run", blocker.unlink


def _corrupt_journal(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    journal = run_dir / "pool.journal.jsonl"
    journal.write_text('not json\n{"op": "trained", "seqs": [1]}\n')
    return run_dir, "pool.journal.jsonl line 1", journal.unlink


@pytest.mark.parametrize("damage", [_blocked_run_dir, _corrupt_journal], ids=["run-dir-unwritable", "journal-corrupt"])
def test_a_boot_that_fails_on_its_run_dir_goes_offline_with_the_reason(live_server, tmp_path, damage):
    run_dir, fragment, repair = damage(tmp_path)
    srv = live_server(SwarmConfig(run_dir=str(run_dir)), start=False)
    with srv.client() as c:
        with pytest.raises(SwarmError, match=fragment):
            c.start(wait=True, timeout=30)
        health = httpx.get(srv.url + "/health").json()
        assert health["state"] == "OFFLINE" and fragment in health["error"]
        assert c.status()["error"] == health["error"]
        repair()  # the reason was accurate: without it the same server boots
        assert c.start(wait=True, timeout=120)["state"] == "ROLLING"
        assert c.status()["error"] is None


def test_an_empty_admin_token_file_is_an_error_not_the_empty_token(tmp_path, monkeypatch, capsys):
    from engine.cli import main

    token_file = tmp_path / "admin_token"
    token_file.write_text("\n")
    with pytest.raises(ConfigError, match="admin_token is empty"):
        resolve_admin_token(None, token_file)
    monkeypatch.delenv("SWARM_ADMIN_TOKEN", raising=False)
    assert main(["serve", "--token-file", str(token_file), "--port", str(free_port())]) == 2
    assert f"admin token file {token_file} is empty" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="admin token is empty"):
        create_app(SwarmServer(default_backend_factory), "")


def test_a_server_that_never_gets_healthy_is_stopped_not_leaked(monkeypatch):
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        return proc

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    try:
        with pytest.raises(TimeoutError, match="/health"):
            ServerProcess(None, health_timeout_s=0)  # nothing can answer /health within 0 s
        (proc,) = started
        assert proc.poll() is not None  # stopped and reaped before the error reached the caller
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
