"""Where benchmark results live: the store's `bench_measurement` table, plus an append-only JSONL file.

`measurements(store, ...)` is THE query for anything that shows benchmark results (the report, `a3r
bench compare/check`, the dashboard's benchmark x commit heatmap): one `Measurement` per (run, metric),
i.e. per (suite, benchmark, commit, round, seed, metric), with the host and the environment's versions.
Group by (benchmark, metric, commit) for a heatmap cell; order commits by `commit_time`.

`record_run` writes one run's measurements in one transaction and is idempotent (unique (run, metric)):
collecting a run twice, or after a retried attempt, never counts it twice. Only rows it actually inserted
are appended to the JSONL file (`<workspace>/bench/results.jsonl`, one JSON object per line, the fields of
`Measurement`), so the file holds each measurement once too, unless the process dies between the commit
and the append (then the line is missing, never doubled; the store is the source of truth and
`export_jsonl` rewrites a complete file from it).

Also here: the state of `a3r bench schedule` (`BenchSchedule` rows), read and written in short
transactions so a restarted scheduler resumes where the last one stopped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlmodel import col, select

from a3r.store import Store
from a3r.store.db import read_tx, write_tx
from a3r.store.models import BenchMeasurement, BenchSchedule, MetricPoint

__all__ = [
    "Measurement",
    "attempt_series",
    "export_jsonl",
    "get_schedule",
    "measured_commits",
    "measurements",
    "record_run",
    "save_schedule",
]


@dataclass(frozen=True)
class Measurement:
    """One metric value of one benchmark run (a row of `bench_measurement`, JSON-friendly)."""

    suite: str
    benchmark: str
    metric: str
    value: float | None
    unit: str
    direction: str
    commit: str
    commit_time: float
    subject: str
    round: int
    seed: int
    host: str
    versions: dict
    run_id: int
    attempt_id: int
    ts: float
    data: dict

    @classmethod
    def from_row(cls, r: BenchMeasurement) -> Measurement:
        return cls(
            suite=r.suite,
            benchmark=r.benchmark,
            metric=r.metric,
            value=r.value,
            unit=r.unit,
            direction=r.direction,
            commit=r.commit,
            commit_time=r.commit_time,
            subject=r.subject,
            round=r.round,
            seed=r.seed,
            host=r.host,
            versions=json.loads(r.versions),
            run_id=r.run_id,
            attempt_id=r.attempt_id,
            ts=r.ts,
            data=json.loads(r.data),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def record_run(store: Store, rows: Sequence[Measurement], jsonl: Path | None = None) -> int:
    """Insert one run's measurements (all share run_id); returns how many were new (0 when recorded
    before). New rows are appended to `jsonl` after the transaction commits."""
    if not rows:
        return 0
    run_ids = {r.run_id for r in rows}
    if len(run_ids) != 1:
        raise ValueError(f"record_run takes the rows of one run, got runs {sorted(run_ids)}")
    with write_tx(store.engine) as s:
        have = set(s.exec(select(BenchMeasurement.metric).where(BenchMeasurement.run_id == rows[0].run_id)))
        new = [r for r in rows if r.metric not in have]
        for r in new:
            s.add(
                BenchMeasurement(
                    **{k: v for k, v in asdict(r).items() if k not in ("versions", "data")},
                    versions=json.dumps(r.versions, sort_keys=True),
                    data=json.dumps(r.data, sort_keys=True),
                )
            )
    if jsonl is not None and new:
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        with open(jsonl, "a", encoding="utf-8") as f:
            f.write("".join(r.to_json() + "\n" for r in new))
    return len(new)


def measurements(
    store: Store,
    *,
    suite: str | None = None,
    benchmark: str | None = None,
    metric: str | None = None,
    commits: Iterable[str] | None = None,
    rounds: Iterable[int] | None = None,
) -> list[Measurement]:
    """Benchmark measurements, oldest commit first (by commit time, then id), filtered as asked."""
    q = select(BenchMeasurement).order_by(col(BenchMeasurement.commit_time), col(BenchMeasurement.id))
    if suite is not None:
        q = q.where(BenchMeasurement.suite == suite)
    if benchmark is not None:
        q = q.where(BenchMeasurement.benchmark == benchmark)
    if metric is not None:
        q = q.where(BenchMeasurement.metric == metric)
    if commits is not None:
        q = q.where(col(BenchMeasurement.commit).in_(list(commits)))
    if rounds is not None:
        q = q.where(col(BenchMeasurement.round).in_(list(rounds)))
    with read_tx(store.engine) as s:
        return [Measurement.from_row(r) for r in s.exec(q)]


def measured_commits(store: Store, suite: str) -> list[str]:
    """Commits with at least one measurement in `suite`, oldest first."""
    seen: dict[str, None] = {}
    for m in measurements(store, suite=suite):
        seen.setdefault(m.commit)
    return list(seen)


def export_jsonl(store: Store, path: Path, *, suite: str | None = None) -> int:
    """Rewrite `path` from the store (atomically); returns the number of lines."""
    rows = measurements(store, suite=suite)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(m.to_json() + "\n" for m in rows))
    tmp.replace(path)
    return len(rows)


# -- schedule state -------------------------------------------------------------------------------------
def get_schedule(store: Store, name: str) -> BenchSchedule | None:
    with read_tx(store.engine) as s:
        return s.get(BenchSchedule, name)


def save_schedule(store: Store, row: BenchSchedule) -> None:
    """Insert or update a schedule row (its `updated_at` set now)."""
    row.updated_at = time.time()
    with write_tx(store.engine) as s:
        s.merge(row)


def attempt_series(store: Store, attempt_id: int) -> dict[str, list[tuple[int, float | None]]]:
    """Every metric one attempt logged: name -> [(step, value)] by step. A benchmark reads only its
    succeeded attempt, so steps of a killed attempt never mix into the measurement."""
    q = (
        select(MetricPoint.name, MetricPoint.step, MetricPoint.value)
        .where(MetricPoint.attempt_id == attempt_id)
        .order_by(MetricPoint.name, MetricPoint.step)
    )
    out: dict[str, list[tuple[int, float | None]]] = {}
    with read_tx(store.engine) as s:
        for name, step, value in s.exec(q):
            out.setdefault(name, []).append((step, value))
    return out
