"""Attempt lifecycle in the store: dispatch, heartbeat, metrics, finish and settle.

Every write here is *fenced*: it re-checks, inside a BEGIN IMMEDIATE transaction, that the row is still
in the state the writer believes it is in, and returns False instead of writing otherwise. That is what
makes concurrent writers safe: a worker whose attempt was declared stale (or cancelled) learns it from
its next heartbeat and stops; a late result from a lost attempt is dropped; two monitors cannot dispatch
the same run. The partial unique indexes in `a3r.store.models` back this up at the database level.
The writes a worker also makes (mark_running, heartbeat, ingest_metrics, finish_attempt) are implemented
once, on plain sqlite3, in `a3r.fenced`; the store passes it a pooled connection.

Facts and decisions are separate steps: `finish_attempt` records what happened to an attempt (written by
the worker, or by the monitor when the worker is gone); `settle_run` records what the scheduler decided
for the run (succeed, fail, or retry as a new pending attempt), so the run's terminal states are stable.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlmodel import col, func, select

from a3r import fenced
from a3r.blueprints.schema import canonical_json, deep_merge
from a3r.exceptions import NotFound
from a3r.states import (
    ACTIVE_ATTEMPT,
    AttemptState,
    RunState,
    check_run_transition,
)
from a3r.store.db import read_tx, write_tx
from a3r.store.models import Attempt, Event, Run

__all__ = ["AttemptOps", "session_name"]

_ACTIVE = [s.value for s in ACTIVE_ATTEMPT]


def session_name(run_id: int, number: int) -> str:
    """tmux session name of attempt `number` of run `run_id` (unique on the campaign socket)."""
    return f"a3r-r{run_id}-a{number}"


class AttemptOps:
    engine: object  # provided by Store

    # -- queries ------------------------------------------------------------------------------------------
    def get_attempt(self, attempt_id: int) -> Attempt:
        with read_tx(self.engine) as s:
            att = s.get(Attempt, attempt_id)
        if att is None:
            raise NotFound(f"no attempt {attempt_id}")
        return att

    def attempts(self, run_id: int) -> list[Attempt]:
        """Every attempt of a run, oldest first (the retry history)."""
        with read_tx(self.engine) as s:
            return list(s.exec(select(Attempt).where(Attempt.run_id == run_id).order_by(Attempt.number)))

    def active_attempts(self, host: str | None = None) -> list[Attempt]:
        """Attempts that hold a slot (dispatched or running), optionally on one host."""
        q = select(Attempt).where(col(Attempt.state).in_(_ACTIVE)).order_by(Attempt.id)
        if host is not None:
            q = q.where(Attempt.host == host)
        with read_tx(self.engine) as s:
            return list(s.exec(q))

    def attempts_by_session(self, host: str, sessions: Sequence[str]) -> dict[str, Attempt]:
        """session name -> attempt, for sessions found on `host`'s socket (the reaper's lookup)."""
        if not sessions:
            return {}
        q = select(Attempt).where(Attempt.host == host, col(Attempt.session).in_(list(sessions)))
        with read_tx(self.engine) as s:
            return {a.session: a for a in s.exec(q)}

    def dispatchable_runs(self, now: float, limit: int) -> list[Run]:
        """Pending runs whose backoff has passed: highest priority first, then FIFO by id."""
        q = (
            select(Run)
            .where(Run.state == RunState.PENDING.value, Run.not_before <= now)
            .order_by(col(Run.priority).desc(), Run.id)
            .limit(limit)
        )
        with read_tx(self.engine) as s:
            return list(s.exec(q))

    def unsettled(self) -> list[tuple[Run, Attempt]]:
        """Runs still dispatched/running whose current attempt already ended: the scheduler decides next."""
        q = (
            select(Run, Attempt)
            .join(Attempt, Attempt.id == Run.current_attempt_id)
            .where(col(Run.state).in_([RunState.DISPATCHED.value, RunState.RUNNING.value]))
            .where(col(Attempt.state).not_in(_ACTIVE))
            .order_by(Run.id)
        )
        with read_tx(self.engine) as s:
            return [(r, a) for r, a in s.exec(q)]

    # -- writes -------------------------------------------------------------------------------------------
    def dispatch(
        self, run_id: int, *, host: str, slot: str, run_dir: str, config_json: str, now: float | None = None
    ) -> Attempt | None:
        """Create the next attempt of a pending run on a free slot; None if the run or slot was taken."""
        now = time.time() if now is None else now
        with write_tx(self.engine) as s:
            run = s.get(Run, run_id)
            if run is None:
                raise NotFound(f"no run {run_id}")
            if run.state != RunState.PENDING or run.not_before > now:
                return None
            busy = s.exec(
                select(Attempt.id).where(
                    Attempt.host == host, Attempt.slot == slot, col(Attempt.state).in_(_ACTIVE)
                )
            ).first()
            if busy is not None:
                return None
            number = (s.exec(select(func.max(Attempt.number)).where(Attempt.run_id == run_id)).one() or 0) + 1
            att = Attempt(
                run_id=run_id,
                number=number,
                retry_of=run.current_attempt_id,
                host=host,
                slot=slot,
                session=session_name(run_id, number),
                attempt_dir=f"{run_dir}/attempts/{number}",
                config_json=config_json,
                fix=run.next_fix,
                dispatched_at=now,
            )
            s.add(att)
            s.flush()
            check_run_transition(run.state, RunState.DISPATCHED)
            run.state, run.current_attempt_id, run.next_fix, run.updated_at = "dispatched", att.id, None, now
            s.add(run)
            s.add(
                Event(
                    ts=now,
                    kind="dispatched",
                    message=f"attempt {number} on {host}/{slot}",
                    run_id=run_id,
                    attempt_id=att.id,
                    host=host,
                )
            )
            return att

    @contextmanager
    def _raw(self) -> Iterator[sqlite3.Connection]:
        """A pooled connection as plain sqlite3 (pragmas applied, driver autocommit) for `a3r.fenced`."""
        raw = self.engine.raw_connection()
        try:
            yield raw.driver_connection
        finally:
            raw.close()

    def mark_running(
        self, attempt_id: int, *, worker_pid: int | None = None, now: float | None = None
    ) -> bool:
        """dispatched -> running for the attempt and its run. False if the attempt is no longer dispatched
        (cancelled or declared stale before the worker started): the worker must not start the job."""
        with self._raw() as conn:
            return fenced.mark_running(conn, attempt_id, worker_pid=worker_pid, now=now)

    def heartbeat(
        self,
        attempt_id: int,
        *,
        now: float | None = None,
        seq: int | None = None,
        job_pgid: int | None = None,
    ) -> bool:
        """Record that the attempt is alive; False means it is no longer active and the job must stop."""
        with self._raw() as conn:
            return fenced.heartbeat(conn, attempt_id, now=now, seq=seq, job_pgid=job_pgid)

    def ingest_metrics(
        self,
        attempt_id: int,
        points: Sequence[tuple[int, str, float | None]],
        *,
        expected_offset: int,
        new_offset: int,
        corrupt: int = 0,
        now: float | None = None,
    ) -> bool:
        """Store metric points read from bytes [expected_offset, new_offset) of the attempt's metrics file.

        Compare-and-set on the offset, so the worker and the monitor can both tail the same file without
        double counting; the (attempt, step, name) unique key makes a replay harmless anyway.
        """
        with self._raw() as conn:
            return fenced.ingest_metrics(
                conn,
                attempt_id,
                points,
                expected_offset=expected_offset,
                new_offset=new_offset,
                corrupt=corrupt,
                now=now,
            )

    def finish_attempt(
        self,
        attempt_id: int,
        state: AttemptState | str,
        *,
        exit_code: int | None = None,
        failure_kind: str | None = None,
        reason: str = "",
        log_tail: str = "",
        now: float | None = None,
    ) -> bool:
        """Record the end of an active attempt; False (nothing written) if it had already ended."""
        with self._raw() as conn:
            return fenced.finish_attempt(
                conn,
                attempt_id,
                state,
                exit_code=exit_code,
                failure_kind=failure_kind,
                reason=reason,
                log_tail=log_tail,
                now=now,
            )

    def settle_run(
        self,
        run_id: int,
        attempt_id: int,
        state: RunState | str,
        *,
        message: str = "",
        failure_kind: str | None = None,
        not_before: float = 0.0,
        overrides: dict | None = None,
        next_fix: str | None = None,
        now: float | None = None,
    ) -> bool:
        """Apply the scheduler's decision for a run whose current attempt ended.

        `state` is the run's final state, or `pending` for a retry (then `not_before` is the backoff and
        `overrides`/`next_fix` the rule fix). False if someone else settled or cancelled it first.
        """
        now = time.time() if now is None else now
        state = RunState(state)
        with write_tx(self.engine) as s:
            run = s.get(Run, run_id)
            att = s.get(Attempt, attempt_id)
            if run is None or att is None or run.current_attempt_id != attempt_id:
                return False
            if run.state not in (RunState.DISPATCHED, RunState.RUNNING) or att.state in _ACTIVE:
                return False
            check_run_transition(run.state, state)
            run.state, run.updated_at, run.message = state.value, now, message
            if state == RunState.PENDING:
                run.not_before, run.next_fix, run.failure_kind, run.ended_at = (
                    not_before,
                    next_fix,
                    None,
                    None,
                )
                if overrides:
                    run.overrides = canonical_json(deep_merge(json.loads(run.overrides), overrides))
            else:
                run.failure_kind, run.ended_at = failure_kind, now
            s.add(run)
            s.add(
                Event(
                    ts=now,
                    kind="retry" if state == RunState.PENDING else f"run_{state.value}",
                    message=message or state.value,
                    run_id=run_id,
                    attempt_id=attempt_id,
                    data=canonical_json({"overrides": overrides or {}, "not_before": not_before}),
                )
            )
            return True
