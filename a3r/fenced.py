"""The fenced attempt writes, on a plain `sqlite3` connection: one implementation shared by the store
(`Store.mark_running` etc. pass a raw connection from SQLAlchemy's pool) and the worker (which opens
its own with `connect`), so a worker starts without importing SQLAlchemy or pydantic.

Each function runs one short BEGIN IMMEDIATE transaction that re-checks the attempt's state and writes
only if the caller's belief still holds, returning False otherwise:

- `mark_running`: dispatched -> running (attempt and run). False: cancelled or declared stale before
  the worker started; the worker must not start the job.
- `heartbeat`: only while active. False: the attempt was closed; the worker must kill its job.
- `ingest_metrics`: compare-and-set on the byte offset of the metrics file, so the worker and the
  monitor can both tail it without double counting. A later line for the same (step, name) replaces the
  earlier value: a job writes a step's metric again only to supersede it (the step retrained after a
  server restart, an evaluation re-measured after a crash cut it short).
- `finish_attempt`: only while active; the first writer of an outcome wins.

Table and column names are those of `a3r.store.models` (checked by the store tests).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from a3r.states import AttemptState, check_attempt_transition

__all__ = ["connect", "finish_attempt", "heartbeat", "ingest_metrics", "mark_running", "metrics_offset"]

_ACTIVE = ("dispatched", "running")


def connect(path: str | Path, *, busy_timeout_s: float = 30.0) -> sqlite3.Connection:
    """A connection with the store's pragmas, in autocommit mode (the functions below BEGIN themselves)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no store at {path}")
    conn = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class _Immediate:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, *_):
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _event(
    conn, now: float, kind: str, message: str, run_id: int, attempt_id: int, host: str | None = None
) -> None:
    conn.execute(
        "INSERT INTO event (ts, kind, message, run_id, attempt_id, host, data) VALUES (?, ?, ?, ?, ?, ?, '{}')",
        (now, kind, message, run_id, attempt_id, host),
    )


def mark_running(
    conn: sqlite3.Connection, attempt_id: int, *, worker_pid: int | None, now: float | None = None
) -> bool:
    now = time.time() if now is None else now
    with _Immediate(conn):
        row = conn.execute("SELECT run_id, state FROM attempt WHERE id = ?", (attempt_id,)).fetchone()
        if row is None or row[1] != AttemptState.DISPATCHED.value:
            return False
        conn.execute(
            "UPDATE attempt SET state = 'running', started_at = ?, heartbeat_at = ?, worker_pid = ? WHERE id = ?",
            (now, now, worker_pid, attempt_id),
        )
        conn.execute(
            "UPDATE run SET state = 'running', updated_at = ? "
            "WHERE id = ? AND current_attempt_id = ? AND state = 'dispatched'",
            (now, row[0], attempt_id),
        )
        return True


def heartbeat(
    conn: sqlite3.Connection,
    attempt_id: int,
    *,
    now: float | None = None,
    seq: int | None = None,
    job_pgid: int | None = None,
) -> bool:
    now = time.time() if now is None else now
    with _Immediate(conn):
        cur = conn.execute(
            "UPDATE attempt SET heartbeat_at = ?, heartbeat_seq = COALESCE(?, heartbeat_seq + 1), "
            "job_pgid = COALESCE(?, job_pgid) WHERE id = ? AND state IN (?, ?)",
            (now, seq, job_pgid, attempt_id, *_ACTIVE),
        )
        return cur.rowcount == 1


def metrics_offset(conn: sqlite3.Connection, attempt_id: int) -> int:
    row = conn.execute("SELECT metrics_offset FROM attempt WHERE id = ?", (attempt_id,)).fetchone()
    return row[0] if row else 0


def ingest_metrics(
    conn: sqlite3.Connection,
    attempt_id: int,
    points: Sequence[tuple[int, str, float | None]],
    *,
    expected_offset: int,
    new_offset: int,
    corrupt: int = 0,
    now: float | None = None,
) -> bool:
    now = time.time() if now is None else now
    with _Immediate(conn):
        row = conn.execute(
            "SELECT run_id, metrics_offset FROM attempt WHERE id = ?", (attempt_id,)
        ).fetchone()
        if row is None or row[1] != expected_offset:
            return False
        run_id = row[0]
        conn.executemany(
            "INSERT INTO metric_point (run_id, attempt_id, step, name, value, ts) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (attempt_id, step, name) DO UPDATE SET value = excluded.value, ts = excluded.ts",
            [(run_id, attempt_id, step, name, value, now) for step, name, value in points],
        )
        conn.execute(
            "UPDATE attempt SET metrics_offset = ?, metrics_corrupt = metrics_corrupt + ? WHERE id = ?",
            (new_offset, corrupt, attempt_id),
        )
        if corrupt:
            _event(
                conn,
                now,
                "metrics_corrupt",
                f"skipped {corrupt} unparsable metrics line(s)",
                run_id,
                attempt_id,
            )
        return True


def finish_attempt(
    conn: sqlite3.Connection,
    attempt_id: int,
    state: AttemptState | str,
    *,
    exit_code: int | None = None,
    failure_kind: str | None = None,
    reason: str = "",
    log_tail: str = "",
    now: float | None = None,
) -> bool:
    now = time.time() if now is None else now
    state = AttemptState(state)
    with _Immediate(conn):
        row = conn.execute(
            "SELECT run_id, state, started_at, host FROM attempt WHERE id = ?", (attempt_id,)
        ).fetchone()
        if row is None or row[1] not in _ACTIVE:
            return False
        run_id, old, started_at, host = row
        if old == AttemptState.DISPATCHED and state in (AttemptState.SUCCEEDED, AttemptState.TIMED_OUT):
            # a result for an attempt whose start we never saw (a fast remote job): it did run
            old, started_at = AttemptState.RUNNING.value, started_at or now
        check_attempt_transition(old, state)
        conn.execute(
            "UPDATE attempt SET state = ?, started_at = ?, ended_at = ?, exit_code = ?, failure_kind = ?, "
            "reason = ?, log_tail = ? WHERE id = ?",
            (state.value, started_at, now, exit_code, failure_kind, reason, log_tail, attempt_id),
        )
        _event(conn, now, f"attempt_{state.value}", reason or state.value, run_id, attempt_id, host)
        return True
