"""Fixtures for A3R tests: real SQLite stores, real tmux servers on per-test sockets, real processes.

Every workspace lives in the test's tmp_path, so its tmux socket name (derived from the path) is unique
to the test; the fixture kills that tmux server at teardown, never anything machine-wide.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from tests_support import TEST_STALE_AFTER_S

from a3r.api import Workspace
from a3r.blueprints import Blueprint, Budget
from a3r.config import HostSpec, SchedulerConfig, WorkspaceConfig

FAKE_JOB = Path(__file__).with_name("fake_job.py")
PY = sys.executable

# Fast clocks so the suite runs in seconds: heartbeat 0.5 s, tick 0.125 s; an attempt is stale after
# TEST_STALE_AFTER_S of silence, not the default 2 heartbeats (why: tests_support; the default rule is checked
# in test_config).
FAST = dict(
    heartbeat_s=0.5,
    stale_after_s=TEST_STALE_AFTER_S,
    backoff_base_s=0.2,
    backoff_max_s=2.0,
    start_grace_s=15.0,
    session_linger_s=0.0,
    kill_grace_s=1.0,
)


def job(*flags: str) -> str:
    """Launch command running the fake job with `flags`."""
    return " ".join([PY, str(FAKE_JOB), *flags])


def make_bp(
    launch: str, *, seeds=(1,), steps=5, wall=60.0, cfg=None, task="t", metrics=("reward", "loss"), name=""
) -> Blueprint:
    return Blueprint(
        purpose="test purpose",
        hypothesis="test hypothesis",
        engine_config=cfg if cfg is not None else {"training": {"micro_batch_size": 8, "lr": 1e-4}},
        task=task,
        seeds=list(seeds),
        budget=Budget(steps=steps, wall_time_s=wall),
        metrics=list(metrics),
        success_criteria="it runs",
        launch_command=launch,
        name=name,
    )


def history(ws: Workspace, run_id: int) -> list[tuple]:
    """Attempt history of a run, for assertion messages."""
    return [(a.number, a.state, a.failure_kind, a.reason, a.log_tail[-300:]) for a in ws.attempts(run_id)]


def pgid_alive(pgid: int | None) -> bool:
    """Any non-zombie process left in process group `pgid` (a SIGKILLed orphan is a zombie until the
    container's init reaps it, and killpg(pgid, 0) would still count it)."""
    if not pgid:
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def wait_for(pred, timeout: float = 20.0, step: float = 0.1, drive: Workspace | None = None):
    """Poll `pred` (ticking `drive`'s scheduler in between) until truthy; returns its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if drive is not None:
            drive.poll()
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture
def make_ws(tmp_path):
    """Factory: a workspace in tmp_path with fast scheduler settings; tmux servers killed at teardown."""
    made: list[Workspace] = []

    def factory(
        slots: int = 2, *, hosts: list[HostSpec] | None = None, name: str = "ws", **sched
    ) -> Workspace:
        cfg = WorkspaceConfig(
            hosts=hosts or [HostSpec(name="local", slots=slots)],
            scheduler=SchedulerConfig(**{**FAST, **sched}),
        )
        ws = Workspace.create(tmp_path / name, cfg)
        made.append(ws)
        return ws

    yield factory
    for ws in made:
        ws.shutdown()
        ws.close()


def kill_pid(pid: int | None) -> None:
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def have_tmux() -> bool:
    return shutil.which("tmux") is not None


def pytest_configure(config):
    config.addinivalue_line("markers", "tmux: needs the tmux binary (skipped by name without it)")
    config.addinivalue_line("markers", "sshd: needs an sshd on loopback started by the test")


def pytest_collection_modifyitems(config, items):
    if have_tmux():
        return
    skip = pytest.mark.skip(reason="tmux not installed: apt-get install -y tmux")
    for item in items:
        if item.get_closest_marker("tmux") is not None:
            item.add_marker(skip)
