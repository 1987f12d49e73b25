"""Fault tolerance: a client SIGKILLed mid-episode leaves the server rolling and the pool clean."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests_support import ADMIN_TOKEN

from engine.config import SwarmConfig

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
    srv = live_server(SwarmConfig(episodes={"idle_timeout_s": 3.0}))
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, srv.url, ADMIN_TOKEN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "CALLED"
        with srv.client() as c:
            assert c.status()["episodes_live"] == 1
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            deadline = time.monotonic() + 10
            while c.status()["episodes_live"] and time.monotonic() < deadline:
                time.sleep(0.1)
            st = c.status()
            assert st["state"] == "ROLLING"
            assert st["episodes_live"] == 0 and st["episode_counts"]["expired"] == 1
            assert st["pool"]["episodes"] == 0
            # the server keeps serving other clients
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
    srv = ServerProcess(None)
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
