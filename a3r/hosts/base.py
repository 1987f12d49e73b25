"""The host interface the scheduler depends on, and what a probe reports.

A host runs attempts in tmux sessions on the workspace's socket and lets the monitor look at them. Two
implementations: `LocalHost` (libtmux, files read directly) and `SshHost` (tmux and the probe run on the
host over ssh). Both raise `HostUnreachable` when the host cannot be reached at all and `HostError` when
it answers but a command fails.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Protocol

from a3r.config import HostSpec
from a3r.worker.spec import AttemptSpec

__all__ = ["AttemptFiles", "HostBackend", "ProbeReport", "ProbeRequest", "SessionInfo", "worker_command"]


@dataclass(frozen=True)
class SessionInfo:
    name: str
    dead: bool  # the worker process exited (remain-on-exit keeps the pane to show its output)
    status: int | None  # the worker's exit status when dead
    pid: int | None


@dataclass(frozen=True)
class ProbeRequest:
    attempt_id: int
    attempt_dir: str
    metrics_offset: int | None  # None: do not read metrics (a local worker streams them itself)


@dataclass
class AttemptFiles:
    heartbeat: dict | None
    result: dict | None
    points: list[tuple[int, str, float | None]] = field(default_factory=list)
    new_offset: int | None = None
    corrupt: int = 0

    @classmethod
    def from_json(cls, d: dict) -> AttemptFiles:
        m = d.get("metrics") or {}
        return cls(
            heartbeat=d.get("heartbeat"),
            result=d.get("result"),
            points=[(int(s), str(n), v) for s, n, v in m.get("points", [])],
            new_offset=m.get("new_offset"),
            corrupt=int(m.get("corrupt", 0)),
        )


@dataclass
class ProbeReport:
    sessions: dict[str, SessionInfo]
    files: dict[int, AttemptFiles]


class HostBackend(Protocol):
    spec: HostSpec
    socket: str

    @property
    def name(self) -> str: ...
    def run_dir(self, run_id: int) -> str: ...
    def worker_db_path(self) -> str | None: ...
    def launch(self, session: str, spec: AttemptSpec, run_files: dict[str, str]) -> None: ...
    def probe(self, requests: list[ProbeRequest]) -> ProbeReport: ...
    def kill(self, session: str, pgid: int | None = None, pid: int | None = None) -> None: ...
    def read_log(self, attempt_dir: str, lines: int) -> str: ...
    def attach_argv(self, session: str) -> list[str]: ...
    def shutdown(self) -> None: ...


def worker_command(python: str, spec: AttemptSpec) -> str:
    """The pane's command line. `exec` so the pane's process *is* the worker: its death is the pane's."""
    return "exec " + shlex.join(
        [python, "-m", "a3r", "worker", "run", str(spec.run_id), "--attempt-dir", spec.attempt_dir]
    )
