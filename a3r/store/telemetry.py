"""Store operations around runs: events, metric queries, hosts, benchmark results and the monitor lease."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import and_, or_
from sqlmodel import col, func, select

from a3r.exceptions import LeaseHeld
from a3r.store.db import read_tx, write_tx
from a3r.store.models import Attempt, BenchResult, Event, Host, MetricPoint, MonitorLease

__all__ = ["TelemetryOps"]


class TelemetryOps:
    engine: object  # provided by Store

    # -- events -------------------------------------------------------------------------------------------
    def record_event(
        self,
        kind: str,
        message: str,
        *,
        run_id: int | None = None,
        attempt_id: int | None = None,
        host: str | None = None,
        data: dict | None = None,
    ) -> None:
        with write_tx(self.engine) as s:
            s.add(
                Event(
                    ts=time.time(),
                    kind=kind,
                    message=message,
                    run_id=run_id,
                    attempt_id=attempt_id,
                    host=host,
                    data=json.dumps(data or {}),
                )
            )

    def events(
        self, *, run_id: int | None = None, kinds: Iterable[str] | None = None, limit: int | None = None
    ) -> list[Event]:
        """Events oldest first (the last `limit` if given)."""
        q = select(Event).order_by(col(Event.id).desc())
        if run_id is not None:
            q = q.where(Event.run_id == run_id)
        if kinds is not None:
            q = q.where(col(Event.kind).in_(list(kinds)))
        if limit is not None:
            q = q.limit(limit)
        with read_tx(self.engine) as s:
            return list(reversed(s.exec(q).all()))

    # -- metrics ------------------------------------------------------------------------------------------
    def metric_series(self, run_id: int, name: str) -> list[tuple[int, float | None]]:
        """(step, value) of one metric over all attempts of a run, by step.

        A retry resumes from a checkpoint and may log steps again; for each step the latest attempt wins.
        A value of None means the job logged NaN.
        """
        return self.metric_series_since(name, {run_id: None})[run_id]

    def metric_series_since(
        self, name: str, since: Mapping[int, int | None]
    ) -> dict[int, list[tuple[int, float | None]]]:
        """run id -> (step, value) of metric `name` after step `since[run id]` (None: every step), by step.

        One query for many runs, so a live view can fetch only the points it has not seen yet. Attempts
        merge as in `metric_series` (per step the latest attempt wins), within the points returned.
        """
        out: dict[int, dict[int, float | None]] = {rid: {} for rid in since}
        if not since:
            return {}
        keep = [
            MetricPoint.run_id == rid
            if after is None
            else and_(MetricPoint.run_id == rid, MetricPoint.step > after)
            for rid, after in since.items()
        ]
        q = (
            select(MetricPoint.run_id, MetricPoint.step, MetricPoint.value)
            .join(Attempt, Attempt.id == MetricPoint.attempt_id)
            .where(MetricPoint.name == name, or_(*keep))
            .order_by(MetricPoint.run_id, MetricPoint.step, Attempt.number)
        )
        with read_tx(self.engine) as s:
            for rid, step, value in s.exec(q):
                out[rid][step] = value
        return {rid: sorted(points.items()) for rid, points in out.items()}

    def metric_names(self, run_id: int) -> list[str]:
        with read_tx(self.engine) as s:
            q = (
                select(MetricPoint.name)
                .where(MetricPoint.run_id == run_id)
                .distinct()
                .order_by(MetricPoint.name)
            )
            return list(s.exec(q))

    def final_metrics(self, run_id: int) -> dict[str, float | None]:
        """Each metric's value at its last logged step (merged over attempts as in `metric_series`)."""
        out = {}
        for name in self.metric_names(run_id):
            series = self.metric_series(run_id, name)
            if series:
                out[name] = series[-1][1]
        return out

    def latest_steps(self, run_ids: Sequence[int] | None = None) -> dict[int, int]:
        """run id -> highest step logged by any attempt (progress for tables)."""
        q = select(MetricPoint.run_id, func.max(MetricPoint.step)).group_by(MetricPoint.run_id)
        if run_ids is not None:
            q = q.where(col(MetricPoint.run_id).in_(list(run_ids)))
        with read_tx(self.engine) as s:
            return {rid: step for rid, step in s.exec(q)}

    # -- hosts --------------------------------------------------------------------------------------------
    def sync_hosts(self, hosts: Sequence[tuple[str, str, list[str]]]) -> None:
        """Mirror the inventory (name, kind, slot names) into the host table; status columns are kept."""
        with write_tx(self.engine) as s:
            for name, kind, slots in hosts:
                row = s.get(Host, name) or Host(name=name, kind=kind)
                row.kind, row.slots = kind, json.dumps(slots)
                s.add(row)

    def set_host_status(
        self, name: str, *, reachable: bool, error: str = "", now: float | None = None
    ) -> bool:
        """Record a probe outcome; returns True when reachability changed (worth an event)."""
        now = time.time() if now is None else now
        with write_tx(self.engine) as s:
            row = s.get(Host, name) or Host(name=name, kind="unknown")
            changed = row.reachable != reachable
            row.reachable, row.last_error = reachable, error
            if reachable:
                row.last_seen, row.unreachable_since = now, None
            elif row.unreachable_since is None:
                row.unreachable_since = now
            s.add(row)
            if changed:
                kind = "host_reachable" if reachable else "host_unreachable"
                s.add(Event(ts=now, kind=kind, message=error or kind, host=name))
            return changed

    def hosts(self) -> list[Host]:
        with read_tx(self.engine) as s:
            return list(s.exec(select(Host).order_by(Host.name)))

    # -- benchmarks ---------------------------------------------------------------------------------------
    def add_bench_result(
        self,
        suite: str,
        name: str,
        value: float,
        *,
        unit: str = "",
        commit: str = "",
        machine: str = "",
        data: dict | None = None,
    ) -> None:
        with write_tx(self.engine) as s:
            s.add(
                BenchResult(
                    ts=time.time(),
                    suite=suite,
                    name=name,
                    value=value,
                    unit=unit,
                    commit=commit,
                    machine=machine,
                    data=json.dumps(data or {}),
                )
            )

    def bench_results(self, suite: str | None = None) -> list[BenchResult]:
        q = select(BenchResult).order_by(BenchResult.id)
        if suite is not None:
            q = q.where(BenchResult.suite == suite)
        with read_tx(self.engine) as s:
            return list(s.exec(q))

    # -- monitor lease ------------------------------------------------------------------------------------
    def acquire_lease(
        self, *, ttl_s: float, pid: int | None = None, now: float | None = None
    ) -> MonitorLease:
        """Become the one scheduler of this store, or raise `LeaseHeld`.

        The lease is free when never taken, held by this process, not renewed for `ttl_s`, or held by a
        process on this machine that no longer exists (a SIGKILLed monitor is replaced at once, not after
        the TTL). A holder on another machine is trusted until its TTL runs out.
        """
        pid = os.getpid() if pid is None else pid
        now = time.time() if now is None else now
        me = socket.gethostname()
        with write_tx(self.engine) as s:
            lease = s.get(MonitorLease, 1)
            ours = lease is not None and lease.hostname == me and lease.pid == pid
            if lease is not None and not ours:
                age = now - lease.renewed_at
                alive = age <= ttl_s and (lease.hostname != me or pid_alive(lease.pid))
                if alive:
                    raise LeaseHeld(
                        f"monitor {lease.owner} holds this store's scheduler lease (renewed {age:.1f} s ago); "
                        "stop it first, or wait for its lease to expire"
                    )
            lease = lease or MonitorLease(owner="", hostname=me, pid=pid, acquired_at=now, renewed_at=now)
            lease.owner, lease.hostname, lease.pid = f"{me}:{pid}", me, pid
            lease.acquired_at, lease.renewed_at = now, now
            s.add(lease)
            if not ours:  # re-taking our own lease (every `Workspace.poll`) is not news
                s.add(Event(ts=now, kind="monitor_start", message=f"monitor {me}:{pid} took the lease"))
            s.flush()
            return lease

    def renew_lease(self, *, pid: int | None = None, now: float | None = None) -> bool:
        """Extend our lease; False if another monitor took it over (we must stop scheduling)."""
        pid = os.getpid() if pid is None else pid
        now = time.time() if now is None else now
        with write_tx(self.engine) as s:
            lease = s.get(MonitorLease, 1)
            if lease is None or lease.pid != pid or lease.hostname != socket.gethostname():
                return False
            lease.renewed_at = now
            s.add(lease)
            return True

    def release_lease(self, *, pid: int | None = None) -> None:
        pid = os.getpid() if pid is None else pid
        with write_tx(self.engine) as s:
            lease = s.get(MonitorLease, 1)
            if lease is not None and lease.pid == pid and lease.hostname == socket.gethostname():
                s.delete(lease)

    def lease(self) -> MonitorLease | None:
        with read_tx(self.engine) as s:
            return s.get(MonitorLease, 1)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    # a zombie (killed, not yet reaped by its parent) still answers kill(0): treat it as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
