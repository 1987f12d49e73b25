"""The Python API of the execution plane: what the leader (and the CLI) use.

    ws = Workspace.create("campaigns/batch-size", WorkspaceConfig(hosts=[HostSpec(name="local", slots=4)]))
    camp = ws.create_campaign("batch-size", goal="smallest batch that still trains")
    stage = ws.create_stage(camp.id, "sweep")
    runs = ws.add_blueprints(stage.id, [bp])          # one run per seed, idempotent per blueprint hash
    ws.start_monitor()                                 # background `a3r monitor` (or call ws.poll())
    status = ws.poll_runs([r.id for r in runs])        # non-blocking; status.done when all terminal
    ws.wait([r.id for r in runs], timeout=3600)        # blocking variant
    ws.metric_series(run_id, "reward"); ws.final_metrics(run_id); ws.attempts(run_id); ws.failures()

A workspace is one directory per campaign: `a3r.yaml` (hosts + scheduler settings), `.a3r/a3r.db`
(the store, path configurable), `runs/<run id>/` (run dirs on the local host).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a3r.blueprints.render import render_files, write_files
from a3r.blueprints.schema import Blueprint
from a3r.config import CONFIG_FILE, WorkspaceConfig
from a3r.exceptions import HostError, NotFound
from a3r.hosts import HostBackend, build_hosts, workspace_key
from a3r.monitor import Monitor
from a3r.scheduler import Scheduler, TickReport
from a3r.states import ACTIVE_ATTEMPT, RUN_TERMINAL, RunState
from a3r.store import Attempt, Campaign, Run, Stage, Store
from a3r.store.telemetry import pid_alive

__all__ = ["FailureInfo", "HostStatus", "RunsStatus", "Workspace"]

DB_RELPATH = ".a3r/a3r.db"


@dataclass(frozen=True)
class RunsStatus:
    """Non-blocking answer to "are these runs done?"."""

    states: dict[int, RunState]
    done: bool  # every run is in a terminal state

    @property
    def unfinished(self) -> list[int]:
        return [rid for rid, s in self.states.items() if s not in RUN_TERMINAL]


@dataclass(frozen=True)
class FailureInfo:
    """One failed attempt, with what the caller needs to fix it."""

    run_id: int
    run_name: str
    run_state: RunState  # pending again means the scheduler is retrying it
    attempt: int
    attempt_state: str
    failure_kind: str | None
    exit_code: int | None
    reason: str
    log_tail: str
    config: dict[str, Any]


@dataclass(frozen=True)
class HostStatus:
    name: str
    kind: str
    reachable: bool
    error: str
    slots: dict[str, int | None]  # slot -> run id holding it (None: free)


class Workspace:
    """A campaign workspace: the store, the host backends and the scheduler built from `a3r.yaml`."""

    def __init__(
        self, root: str | Path, *, config: WorkspaceConfig | None = None, db_path: str | Path | None = None
    ):
        """Open the workspace at `root` (created if missing). `config` overrides `a3r.yaml` for this
        process only; use `Workspace.create` to persist it for the monitor and the CLI."""
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.config = config or WorkspaceConfig.load(self.root / CONFIG_FILE)
        self.db_path = Path(db_path).resolve() if db_path else self.root / DB_RELPATH
        self.store = Store(self.db_path)
        self.hosts: dict[str, HostBackend] = build_hosts(self.config, self.root, self.db_path)
        self.store.sync_hosts([(h.name, h.kind, [s.name for s in h.slots]) for h in self.config.hosts])
        self._scheduler: Scheduler | None = None

    @classmethod
    def create(
        cls, root: str | Path, config: WorkspaceConfig | None = None, *, db_path: str | Path | None = None
    ) -> Workspace:
        """Write `a3r.yaml` (the given config, or the defaults) and open the workspace."""
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        (config or WorkspaceConfig()).save(root / CONFIG_FILE)
        return cls(root, config=config, db_path=db_path)

    @property
    def key(self) -> str:
        return workspace_key(self.root)

    def close(self) -> None:
        """Release the scheduler lease if `poll()` took it, and close the store."""
        if self._scheduler is not None:
            self._scheduler.close()
            self.store.release_lease()
        self.store.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- planning -----------------------------------------------------------------------------------------
    def create_campaign(self, name: str, goal: str = "") -> Campaign:
        """The campaign `name` (created if new; an existing one is returned)."""
        return self.store.create_campaign(name, goal)

    def create_stage(self, campaign_id: int, name: str, purpose: str = "") -> Stage:
        """The stage `name` of a campaign (created if new; an existing one is returned)."""
        return self.store.create_stage(campaign_id, name, purpose)

    def add_blueprints(
        self, stage_id: int, blueprints: Sequence[Blueprint], *, priority: int = 0
    ) -> list[Run]:
        """Add blueprints to a stage: one pending run per seed, in order. Idempotent per blueprint hash.

        Each run's directory is rendered at once under `runs/<id>/` for humans; the scheduler renders it
        again (with any rule-fix overrides, and host paths) when it dispatches an attempt.
        """
        out: list[Run] = []
        for bp in blueprints:
            runs = self.store.add_blueprint(stage_id, bp, priority=priority)
            for run in runs:
                run_dir = self.root / "runs" / str(run.id)
                if not (run_dir / "run.sh").exists():
                    write_files(run_dir, render_files(bp, run_id=run.id, seed=run.seed, run_dir=str(run_dir)))
            out.extend(runs)
        return out

    # -- scheduling ---------------------------------------------------------------------------------------
    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            self._scheduler = Scheduler(self.store, self.hosts, self.config.scheduler)
        return self._scheduler

    def poll(self) -> TickReport:
        """Run one scheduler tick in this process (takes the lease: raises LeaseHeld if a monitor runs)."""
        self.store.acquire_lease(ttl_s=self.config.scheduler.lease_ttl)
        return self.scheduler.tick()

    def monitor(self) -> Monitor:
        """A `Monitor` over this workspace; `.run()` blocks (what `a3r monitor` does)."""
        return Monitor(self.store, self.scheduler)

    def start_monitor(self, *, log_file: str | Path | None = None) -> int:
        """Start `a3r monitor` for this workspace as a detached background process; returns its pid.

        Its output goes to `.a3r/monitor.log`. If a monitor already runs, the new one exits at once
        (lease held), so calling this again is harmless.
        """
        log = Path(log_file) if log_file else self.root / ".a3r" / "monitor.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "a3r",
            "--workspace",
            str(self.root),
            "--db",
            str(self.db_path),
            "monitor",
        ]
        with open(log, "ab") as f:
            proc = subprocess.Popen(
                cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        return proc.pid

    def monitor_pid(self) -> int | None:
        """Pid of the live monitor holding the lease on this machine, if any.

        A holder on this machine counts while its process exists, even if a slow tick (a loaded machine)
        let the lease age past its TTL: it renews at the end of the tick. Elsewhere only the TTL can tell.
        """
        lease = self.store.lease()
        if lease is None:
            return None
        if lease.hostname == socket.gethostname():
            return lease.pid if pid_alive(lease.pid) else None
        return lease.pid if time.time() - lease.renewed_at <= self.config.scheduler.lease_ttl else None

    def stop_monitor(self, timeout: float = 10.0) -> bool:
        """SIGTERM the monitor holding the lease on this machine and wait for it to let go."""
        pid = self.monitor_pid()
        if pid is None:
            return True
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.store.lease() is None:
                return True
            time.sleep(0.05)
        return False

    # -- observing ----------------------------------------------------------------------------------------
    def run(self, run_id: int) -> Run:
        return self.store.get_run(run_id)

    def runs(self, **filters: Any) -> list[Run]:
        """Runs filtered by campaign_id, stage_id, states, ids (see `Store.runs`)."""
        return self.store.runs(**filters)

    def poll_runs(self, run_ids: Iterable[int]) -> RunsStatus:
        """States of the given runs and whether all are terminal. Never blocks."""
        ids = list(run_ids)
        found = {r.id: RunState(r.state) for r in self.store.runs(ids=ids)}
        missing = set(ids) - set(found)
        if missing:
            raise NotFound(f"no runs {sorted(missing)}")
        return RunsStatus(states=found, done=all(s in RUN_TERMINAL for s in found.values()))

    def wait(
        self,
        run_ids: Iterable[int],
        *,
        timeout: float | None = None,
        poll_s: float | None = None,
        drive: bool = False,
    ) -> dict[int, RunState]:
        """Block until every run is terminal; returns their states. Raises TimeoutError after `timeout`.

        With `drive=True` this process ticks the scheduler itself (no monitor needed); otherwise a
        monitor (`start_monitor` or `a3r monitor`) must be running.
        """
        ids = list(run_ids)
        poll_s = poll_s or self.config.scheduler.tick
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if drive:
                self.poll()
            status = self.poll_runs(ids)
            if status.done:
                return status.states
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"runs {status.unfinished} not finished after {timeout} s: {status.states}"
                )
            time.sleep(poll_s)

    def metric_series(self, run_id: int, name: str) -> list[tuple[int, float | None]]:
        """(step, value) of a metric over all attempts (a retry's steps replace the earlier ones)."""
        return self.store.metric_series(run_id, name)

    def final_metrics(self, run_id: int) -> dict[str, float | None]:
        """Each metric's value at its last step."""
        return self.store.final_metrics(run_id)

    def attempts(self, run_id: int) -> list[Attempt]:
        """The run's attempts, oldest first; `retry_of` links each retry to the one before."""
        return self.store.attempts(run_id)

    def failures(
        self, *, campaign_id: int | None = None, stage_id: int | None = None, final_only: bool = False
    ) -> list[FailureInfo]:
        """Failed, timed-out and stale attempts with log tails; `final_only` keeps runs that will not retry."""
        out = []
        for run in self.store.runs(campaign_id=campaign_id, stage_id=stage_id):
            if final_only and run.state not in (RunState.FAILED, RunState.TIMED_OUT, RunState.STALE):
                continue
            for a in self.store.attempts(run.id):
                if a.state in ("failed", "timed_out", "stale"):
                    out.append(
                        FailureInfo(
                            run_id=run.id,
                            run_name=run.name,
                            run_state=RunState(run.state),
                            attempt=a.number,
                            attempt_state=a.state,
                            failure_kind=a.failure_kind,
                            exit_code=a.exit_code,
                            reason=a.reason,
                            log_tail=a.log_tail,
                            config=json.loads(a.config_json),
                        )
                    )
        return out

    # -- acting -------------------------------------------------------------------------------------------
    def cancel(self, run_ids: Sequence[int], reason: str = "cancelled by caller") -> list[int]:
        """Cancel runs (pending ones never start; running ones are killed). Returns attempt ids killed."""
        killed = self.store.cancel_runs(run_ids, reason)
        for a in killed:
            host = self.hosts.get(a.host)
            if host is None:
                continue
            try:
                host.kill(a.session, pgid=a.job_pgid, pid=a.worker_pid)
            except (HostError, OSError):
                pass  # the monitor's reaper fences it once the host answers
        return [a.id for a in killed]

    def retry(
        self, run_id: int, *, overrides: dict[str, Any] | None = None, reason: str = "retry requested"
    ) -> Run:
        """Send a failed/timed-out/stale run back to pending, with optional engine-config overrides."""
        return self.store.retry_run(run_id, overrides=overrides, reason=reason)

    def _attempt(self, run_id: int, attempt: int | None) -> Attempt:
        atts = self.store.attempts(run_id)
        if not atts:
            raise NotFound(f"run {run_id} has no attempts yet")
        if attempt is None:
            return atts[-1]
        for a in atts:
            if a.number == attempt:
                return a
        raise NotFound(f"run {run_id} has no attempt {attempt}")

    def logs(self, run_id: int, *, attempt: int | None = None, lines: int = 100) -> str:
        """The last `lines` of an attempt's log (latest attempt by default), from whichever host ran it."""
        a = self._attempt(run_id, attempt)
        host = self.hosts.get(a.host)
        if host is None:
            raise NotFound(f"host {a.host} of run {run_id} is not in the inventory")
        return host.read_log(a.attempt_dir, lines)

    def attach_argv(self, run_id: int, *, attempt: int | None = None) -> list[str]:
        """The command that attaches a terminal to the attempt's tmux session."""
        a = self._attempt(run_id, attempt)
        return self.hosts[a.host].attach_argv(a.session)

    def host_status(self) -> list[HostStatus]:
        """Live view: probe each host (reachability) and show which run holds each slot."""
        holders = {
            (a.host, a.slot): a.run_id for a in self.store.active_attempts() if a.state in ACTIVE_ATTEMPT
        }
        out = []
        for name, host in self.hosts.items():
            try:
                host.probe([])
                ok, err = True, ""
            except (HostError, OSError) as e:
                ok, err = False, str(e)
            slots = {s.name: holders.get((name, s.name)) for s in host.spec.slots}
            out.append(HostStatus(name=name, kind=host.spec.kind, reachable=ok, error=err, slots=slots))
        return out

    def shutdown(self) -> None:
        """Kill this workspace's tmux servers on every reachable host (all sessions). Tests and teardown."""
        for host in self.hosts.values():
            try:
                host.shutdown()
            except (HostError, OSError):
                pass
