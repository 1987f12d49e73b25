"""SQLModel tables of the run store.

Campaign -> Stage -> BlueprintRecord -> Run -> Attempt, plus MetricPoint, Event, Host, BenchResult,
MonitorLease and SchemaVersion; BenchMeasurement and BenchSchedule hold regression benchmarks
(`a3r.bench.store` reads and writes them). Timestamps are float seconds since the epoch (`time.time()`) taken on the
controller, except a local worker's heartbeat, written on the same machine.

State columns hold the *values* of `a3r.states` enums as plain strings ("pending", ...); the enums are
`str` subclasses, so `run.state == RunState.PENDING` works on loaded rows.

Invariants the database itself enforces (so no code path can break them):
- at most one active (dispatched/running) attempt per run, and per (host, slot);
- one run per (blueprint, seed); one blueprint per (stage, content hash); one point per
  (attempt, step, metric name), so re-ingesting a metrics file is idempotent.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

__all__ = [
    "Attempt",
    "BenchMeasurement",
    "BenchResult",
    "BenchSchedule",
    "BlueprintRecord",
    "Campaign",
    "Event",
    "Host",
    "MetricPoint",
    "MonitorLease",
    "Run",
    "SchemaVersion",
    "Stage",
]

_ACTIVE = text("state IN ('dispatched', 'running')")


class SchemaVersion(SQLModel, table=True):
    __tablename__ = "schema_version"
    version: int = Field(primary_key=True)
    applied_at: float


class Campaign(SQLModel, table=True):
    __tablename__ = "campaign"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    goal: str = ""
    created_at: float


class Stage(SQLModel, table=True):
    __tablename__ = "stage"
    __table_args__ = (UniqueConstraint("campaign_id", "name"),)
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    index: int  # 0, 1, ... in creation order within the campaign
    name: str
    purpose: str = ""
    created_at: float


class BlueprintRecord(SQLModel, table=True):
    __tablename__ = "blueprint"
    __table_args__ = (UniqueConstraint("stage_id", "content_hash"),)
    id: int | None = Field(default=None, primary_key=True)
    stage_id: int = Field(foreign_key="stage.id", index=True)
    content_hash: str
    label: str
    data: str = Field(sa_column=Column(Text, nullable=False))  # Blueprint as canonical JSON
    created_at: float


class Run(SQLModel, table=True):
    __tablename__ = "run"
    __table_args__ = (
        UniqueConstraint("blueprint_id", "seed"),
        Index("ix_run_dispatch", "state", "priority", "id"),
    )
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    stage_id: int = Field(foreign_key="stage.id", index=True)
    blueprint_id: int = Field(foreign_key="blueprint.id")
    seed: int
    name: str  # "<blueprint label>-s<seed>"
    state: str = "pending"  # RunState value
    priority: int = 0  # higher first; FIFO (by id) within a priority
    not_before: float = 0.0  # retry backoff: not dispatched before this time
    overrides: str = "{}"  # JSON deep-merged into engine_config (rule fixes, caller changes)
    current_attempt_id: int | None = None
    next_fix: str | None = None  # what changed before the next attempt (copied into Attempt.fix)
    failure_kind: str | None = None  # FailureKind value of the attempt that made the run terminal
    message: str = ""  # why the run is in its state (last decision)
    created_at: float
    updated_at: float
    ended_at: float | None = None


class Attempt(SQLModel, table=True):
    __tablename__ = "attempt"
    __table_args__ = (
        UniqueConstraint("run_id", "number"),
        Index("ux_attempt_active_run", "run_id", unique=True, sqlite_where=_ACTIVE),
        Index("ux_attempt_active_slot", "host", "slot", unique=True, sqlite_where=_ACTIVE),
        Index("ix_attempt_state", "state"),
    )
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    number: int  # 1, 2, ... per run
    retry_of: int | None = Field(default=None, foreign_key="attempt.id")  # previous attempt of this run
    state: str = "dispatched"  # AttemptState value
    host: str
    slot: str
    session: str  # tmux session name on the host's campaign socket
    attempt_dir: str  # on the host: heartbeat.json, result.json, metrics.jsonl, log.txt
    config_json: str = "{}"  # the effective engine config this attempt ran with
    fix: str | None = None  # rule fix applied before this attempt (e.g. "oom: micro_batch_size 8 -> 4")
    dispatched_at: float
    started_at: float | None = None
    heartbeat_at: float | None = None  # controller/worker clock of the last heartbeat seen
    heartbeat_seq: int = 0
    ended_at: float | None = None
    exit_code: int | None = None
    failure_kind: str | None = None  # FailureKind value
    reason: str = ""  # human-readable cause of the final state
    log_tail: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    worker_pid: int | None = None
    job_pgid: int | None = None
    metrics_offset: int = 0  # bytes of metrics.jsonl already ingested
    metrics_corrupt: int = 0  # lines skipped as unparsable


class MetricPoint(SQLModel, table=True):
    __tablename__ = "metric_point"
    __table_args__ = (UniqueConstraint("attempt_id", "step", "name"), Index("ix_point_run", "run_id", "name"))
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    attempt_id: int = Field(foreign_key="attempt.id")
    step: int
    name: str
    value: float | None  # None: the job logged NaN (SQLite cannot store NaN)
    ts: float


class Event(SQLModel, table=True):
    __tablename__ = "event"
    id: int | None = Field(default=None, primary_key=True)
    ts: float = Field(index=True)
    kind: str  # e.g. "dispatched", "stale", "retry", "fix", "metrics_corrupt", "host_unreachable"
    message: str
    run_id: int | None = Field(default=None, foreign_key="run.id", index=True)
    attempt_id: int | None = Field(default=None, foreign_key="attempt.id")
    host: str | None = None
    data: str = "{}"


class Host(SQLModel, table=True):
    """The live view of an inventory host; the inventory file stays the configuration."""

    __tablename__ = "host"
    name: str = Field(primary_key=True)
    kind: str  # "local" | "ssh"
    slots: str = "[]"  # JSON list of slot names
    reachable: bool = True
    last_seen: float | None = None
    last_error: str = ""
    unreachable_since: float | None = None


class BenchResult(SQLModel, table=True):
    __tablename__ = "bench_result"
    id: int | None = Field(default=None, primary_key=True)
    ts: float
    suite: str
    name: str
    value: float
    unit: str = ""
    commit: str = ""
    machine: str = ""
    data: str = "{}"


class BenchMeasurement(SQLModel, table=True):
    """One metric of one benchmark run at one commit: the cell data of the benchmark x commit heatmap.

    One row per (run, metric): a run is one (suite, benchmark, commit, round, seed), so a retried attempt
    or a collector that runs twice cannot count a measurement twice. Only a succeeded attempt is measured.
    """

    __tablename__ = "bench_measurement"
    __table_args__ = (
        UniqueConstraint("run_id", "metric"),
        Index("ix_bench_cell", "suite", "benchmark", "metric", "commit"),
    )
    id: int | None = Field(default=None, primary_key=True)
    ts: float  # when it was recorded
    suite: str
    benchmark: str
    metric: str
    value: float | None  # None: the run did not log what the metric needs
    unit: str = ""
    direction: str = "higher"  # a3r.bench.suite.Direction value
    commit: str  # full sha
    commit_time: float = 0.0  # committer time (orders the history)
    subject: str = ""  # first line of the commit message
    round: int = 0  # 0: the first measurement; k: the k-th confirming rerun (fresh seeds)
    seed: int
    host: str = ""
    versions: str = "{}"  # JSON: python, torch, transformers, ... of the environment the job ran in
    run_id: int = Field(foreign_key="run.id")
    attempt_id: int = Field(foreign_key="attempt.id")
    data: str = "{}"  # JSON: load average at start, job wall time, environment key


class BenchSchedule(SQLModel, table=True):
    """State of one `a3r bench schedule` (a suite on a branch, every `every_s`): survives restarts."""

    __tablename__ = "bench_schedule"
    name: str = Field(primary_key=True)  # "<suite>@<branch>"
    repo: str
    branch: str
    suite_path: str
    every_s: float
    last_run_at: float | None = None
    last_commit: str = ""
    last_status: str = ""  # what the last round said (measured, skipped, regression, error: ...)
    updated_at: float = 0.0


class MonitorLease(SQLModel, table=True):
    """Single row (id=1): which process runs the scheduler for this store, so two never dispatch at once."""

    __tablename__ = "monitor_lease"
    id: int = Field(default=1, primary_key=True)
    owner: str  # "<hostname>:<pid>"
    hostname: str
    pid: int
    acquired_at: float
    renewed_at: float
