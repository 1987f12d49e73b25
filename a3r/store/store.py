"""The run store: campaigns, stages, blueprints and runs (creation, queries, cancel, explicit retry).

`Store` is the only code that writes the database. Attempt lifecycle writes (dispatch, heartbeat, metric
ingestion, finishing and settling) live in `a3r.store.attempts`; events, metrics queries, hosts,
benchmarks and the monitor lease in `a3r.store.telemetry`. Methods return detached row snapshots.

Creation is idempotent on purpose: the leader re-runs a graph node after a crash, so creating the same
campaign, stage or blueprint again returns what exists instead of duplicating runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sqlmodel import col, select

from a3r.blueprints.schema import Blueprint, canonical_json, deep_merge
from a3r.exceptions import NotFound, SchemaError
from a3r.states import RunState, check_run_transition
from a3r.store.attempts import AttemptOps
from a3r.store.db import SCHEMA_VERSION, make_engine, migrate, read_tx, schema_version, write_tx
from a3r.store.models import Attempt, BlueprintRecord, Campaign, Event, Run, Stage
from a3r.store.telemetry import TelemetryOps

__all__ = ["Store"]


class Store(AttemptOps, TelemetryOps):
    """All persistent state of one workspace, in one SQLite file."""

    def __init__(
        self, path: str | Path, *, create: bool = True, busy_timeout_s: float = 30.0, read_only: bool = False
    ):
        """Open (and with `create`, create or migrate) the store at `path`.

        Workers open with `create=False`: they must never race the controller into creating a schema.
        `read_only` (implies not `create`) opens the file with SQLite's read-only mode: every write method
        then fails at the database, which is what read-only viewers such as the dashboard want. A viewer
        also reads an older schema (it cannot migrate it); `version` says which, so it can skip tables
        the file does not have yet.
        """
        self.path = Path(path)
        create = create and not read_only
        if not create and not self.path.exists():
            raise SchemaError(f"no store at {self.path}; create it with the controller first")
        self.engine = make_engine(self.path, busy_timeout_s=busy_timeout_s, read_only=read_only)
        if create:
            migrate(self.engine)
        v = schema_version(self.engine)
        if v != SCHEMA_VERSION and not (read_only and 1 <= v < SCHEMA_VERSION):
            raise SchemaError(f"store {self.path} is at schema {v}, this a3r expects {SCHEMA_VERSION}")
        self.version = v

    def close(self) -> None:
        self.engine.dispose()

    def backup(self, dest: str | Path) -> None:
        """A consistent copy of the live file (SQLite `VACUUM INTO`), safe while others write."""
        raw = self.engine.raw_connection()  # outside SQLAlchemy's transaction: VACUUM refuses to run in one
        try:
            raw.driver_connection.execute("VACUUM INTO ?", (str(dest),))
        finally:
            raw.close()

    # -- campaigns and stages -----------------------------------------------------------------------------
    def create_campaign(self, name: str, goal: str = "") -> Campaign:
        """The campaign called `name`, created if new (an existing one is returned unchanged)."""
        with write_tx(self.engine) as s:
            found = s.exec(select(Campaign).where(Campaign.name == name)).first()
            if found:
                return found
            c = Campaign(name=name, goal=goal, created_at=time.time())
            s.add(c)
            s.flush()
            return c

    def get_campaign(self, key: int | str) -> Campaign:
        """A campaign by id or name."""
        with read_tx(self.engine) as s:
            q = select(Campaign).where(Campaign.id == key if isinstance(key, int) else Campaign.name == key)
            found = s.exec(q).first()
        if found is None:
            raise NotFound(f"no campaign {key!r}")
        return found

    def campaigns(self) -> list[Campaign]:
        with read_tx(self.engine) as s:
            return list(s.exec(select(Campaign).order_by(Campaign.id)))

    def create_stage(self, campaign_id: int, name: str, purpose: str = "") -> Stage:
        """The stage `name` of a campaign, created (with the next index) if new."""
        with write_tx(self.engine) as s:
            if s.get(Campaign, campaign_id) is None:
                raise NotFound(f"no campaign {campaign_id}")
            found = s.exec(select(Stage).where(Stage.campaign_id == campaign_id, Stage.name == name)).first()
            if found:
                return found
            n = len(s.exec(select(Stage.id).where(Stage.campaign_id == campaign_id)).all())
            st = Stage(campaign_id=campaign_id, index=n, name=name, purpose=purpose, created_at=time.time())
            s.add(st)
            s.flush()
            return st

    def stages(self, campaign_id: int) -> list[Stage]:
        with read_tx(self.engine) as s:
            return list(s.exec(select(Stage).where(Stage.campaign_id == campaign_id).order_by(Stage.index)))

    # -- blueprints and runs ------------------------------------------------------------------------------
    def add_blueprint(self, stage_id: int, bp: Blueprint, *, priority: int = 0) -> list[Run]:
        """Record `bp` in a stage and create one pending run per seed; returns the runs in seed order.

        Adding a blueprint with the same content hash to the same stage again returns the existing runs.
        """
        digest = bp.content_hash()
        now = time.time()
        with write_tx(self.engine) as s:
            stage = s.get(Stage, stage_id)
            if stage is None:
                raise NotFound(f"no stage {stage_id}")
            rec = s.exec(
                select(BlueprintRecord).where(
                    BlueprintRecord.stage_id == stage_id, BlueprintRecord.content_hash == digest
                )
            ).first()
            if rec is None:
                rec = BlueprintRecord(
                    stage_id=stage_id,
                    content_hash=digest,
                    label=bp.label,
                    data=canonical_json(bp.model_dump(mode="json")),
                    created_at=now,
                )
                s.add(rec)
                s.flush()
            existing = {r.seed: r for r in s.exec(select(Run).where(Run.blueprint_id == rec.id))}
            runs = []
            for seed in bp.seeds:
                run = existing.get(seed)
                if run is None:
                    run = Run(
                        campaign_id=stage.campaign_id,
                        stage_id=stage_id,
                        blueprint_id=rec.id,
                        seed=seed,
                        name=f"{bp.label}-s{seed}",
                        priority=priority,
                        created_at=now,
                        updated_at=now,
                    )
                    s.add(run)
                    s.flush()
                    s.add(Event(ts=now, kind="created", message=f"run {run.name} created", run_id=run.id))
                runs.append(run)
            return runs

    def blueprint_of(self, run: Run | int) -> Blueprint:
        """The validated blueprint a run (or run id) was created from."""
        run = run if isinstance(run, Run) else self.get_run(run)
        with read_tx(self.engine) as s:
            rec = s.get(BlueprintRecord, run.blueprint_id)
        return Blueprint.model_validate_json(rec.data)

    def get_run(self, run_id: int) -> Run:
        with read_tx(self.engine) as s:
            run = s.get(Run, run_id)
        if run is None:
            raise NotFound(f"no run {run_id}")
        return run

    def runs(
        self,
        *,
        campaign_id: int | None = None,
        stage_id: int | None = None,
        states: Iterable[RunState | str] | None = None,
        ids: Iterable[int] | None = None,
    ) -> list[Run]:
        """Runs matching every given filter, by id."""
        q = select(Run).order_by(Run.id)
        if campaign_id is not None:
            q = q.where(Run.campaign_id == campaign_id)
        if stage_id is not None:
            q = q.where(Run.stage_id == stage_id)
        if states is not None:
            q = q.where(col(Run.state).in_([RunState(x).value for x in states]))
        if ids is not None:
            q = q.where(col(Run.id).in_(list(ids)))
        with read_tx(self.engine) as s:
            return list(s.exec(q))

    def cancel_runs(self, run_ids: Sequence[int], reason: str = "cancelled by caller") -> list[Attempt]:
        """Cancel runs that are not final; returns the attempts that were active (their sessions to kill)."""
        now = time.time()
        killed: list[Attempt] = []
        with write_tx(self.engine) as s:
            for rid in run_ids:
                run = s.get(Run, rid)
                if run is None:
                    raise NotFound(f"no run {rid}")
                if run.state in (RunState.SUCCEEDED, RunState.CANCELLED):
                    continue
                check_run_transition(run.state, RunState.CANCELLED)
                if run.current_attempt_id is not None:
                    att = s.get(Attempt, run.current_attempt_id)
                    if att.state in ("dispatched", "running"):
                        att.state, att.ended_at, att.reason = "cancelled", now, reason
                        s.add(att)
                        killed.append(att)
                run.state, run.updated_at, run.ended_at, run.message = (
                    RunState.CANCELLED.value,
                    now,
                    now,
                    reason,
                )
                s.add(run)
                s.add(Event(ts=now, kind="cancelled", message=reason, run_id=rid))
        return killed

    def retry_run(
        self, run_id: int, *, overrides: dict[str, Any] | None = None, reason: str = "retry requested"
    ) -> Run:
        """Send a failed, timed-out or stale run back to pending, optionally merging config overrides.

        This is how the caller hands a fixed code failure back; the next attempt links to the last one.
        """
        now = time.time()
        with write_tx(self.engine) as s:
            run = s.get(Run, run_id)
            if run is None:
                raise NotFound(f"no run {run_id}")
            check_run_transition(run.state, RunState.PENDING)
            if overrides:
                run.overrides = canonical_json(deep_merge(json.loads(run.overrides), overrides))
            run.state, run.not_before, run.updated_at, run.ended_at = RunState.PENDING.value, 0.0, now, None
            run.message, run.failure_kind = reason, None
            run.next_fix = f"{reason}: overrides {canonical_json(overrides)}" if overrides else reason
            s.add(run)
            s.add(
                Event(
                    ts=now, kind="retry", message=reason, run_id=run_id, data=canonical_json(overrides or {})
                )
            )
            s.flush()
            return run
