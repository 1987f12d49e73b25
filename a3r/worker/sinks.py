"""Where a worker reports: the store directly (local hosts) or nowhere but its files (ssh hosts).

The worker always writes heartbeat.json and result.json in the attempt directory; a sink adds the
store writes. Every store write is fenced (see `a3r.store.attempts`): a False answer means the attempt is
no longer ours (cancelled, or declared stale) and the worker must stop the job.
"""

from __future__ import annotations

import sqlite3
from typing import Protocol

from a3r import fenced
from a3r.worker.metrics import MetricsChunk

__all__ = ["FileSink", "Sink", "StoreSink"]


class Sink(Protocol):
    def start(self, worker_pid: int) -> bool: ...
    def heartbeat(self, seq: int, job_pgid: int | None) -> bool: ...
    def metrics(self, chunk: MetricsChunk, expected_offset: int) -> int: ...
    def finish(
        self, state: str, *, exit_code: int | None, failure_kind: str | None, reason: str, log_tail: str
    ) -> bool: ...


class FileSink:
    """No store access: the monitor reads the attempt's files over ssh and ingests them."""

    def start(self, worker_pid: int) -> bool:
        return True

    def heartbeat(self, seq: int, job_pgid: int | None) -> bool:
        return True

    def metrics(self, chunk: MetricsChunk, expected_offset: int) -> int:
        return chunk.new_offset

    def finish(self, state, *, exit_code, failure_kind, reason, log_tail) -> bool:
        return True


class StoreSink:
    """Writes heartbeats, metric points and the result straight into the store (`a3r.fenced`, stdlib
    sqlite3: the worker never loads SQLAlchemy)."""

    def __init__(self, db_path: str, attempt_id: int):
        self.conn = fenced.connect(db_path)
        self.attempt_id = attempt_id

    def start(self, worker_pid: int) -> bool:
        return fenced.mark_running(self.conn, self.attempt_id, worker_pid=worker_pid)

    def heartbeat(self, seq: int, job_pgid: int | None) -> bool:
        try:
            return fenced.heartbeat(self.conn, self.attempt_id, seq=seq, job_pgid=job_pgid)
        except sqlite3.OperationalError:
            # the store being briefly unavailable (locked past busy_timeout) is no reason to kill a
            # training job; if it stays unavailable the monitor sees the silence and decides
            return True

    def metrics(self, chunk: MetricsChunk, expected_offset: int) -> int:
        try:
            ok = fenced.ingest_metrics(
                self.conn,
                self.attempt_id,
                chunk.points,
                expected_offset=expected_offset,
                new_offset=chunk.new_offset,
                corrupt=chunk.corrupt,
            )
        except sqlite3.OperationalError:
            return expected_offset  # retried from the same offset next time
        return chunk.new_offset if ok else fenced.metrics_offset(self.conn, self.attempt_id)

    def finish(self, state, *, exit_code, failure_kind, reason, log_tail) -> bool:
        return fenced.finish_attempt(
            self.conn,
            self.attempt_id,
            state,
            exit_code=exit_code,
            failure_kind=failure_kind,
            reason=reason,
            log_tail=log_tail,
        )

    def close(self) -> None:
        self.conn.close()
