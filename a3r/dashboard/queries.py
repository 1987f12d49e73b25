"""Read-only views of one store for the dashboard: campaign summaries with stage progress, the run table
(state from heartbeats, varying config columns, last and best values), a run's page, metric points after a
given step, and flat rows for CSV/JSON export.

Everything goes through the store's query methods; nothing here writes (the store is opened read-only).
"Best" is the maximum unless the metric's name says lower is better (loss, error, perplexity, time,
latency): blueprints record which metric is primary, not its direction.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from a3r.blueprints.schema import Blueprint
from a3r.dashboard.sources import Source
from a3r.states import ACTIVE_ATTEMPT, RUN_TERMINAL
from a3r.store import Attempt, Run, Store

__all__ = [
    "campaign_summaries",
    "lower_is_better",
    "metric_export_rows",
    "run_detail",
    "run_table",
    "stage_progress",
]

_LOWER = ("loss", "error", "err_", "perplexity", "latency", "time")
_ACTIVE = {s.value for s in ACTIVE_ATTEMPT}
_TERMINAL = {s.value for s in RUN_TERMINAL}
LOG_TAIL_BYTES = 64 * 1024  # of a running attempt's log.txt


def lower_is_better(metric: str) -> bool:
    """Whether smaller values of `metric` are better (by its name; see the module docstring)."""
    name = metric.lower()
    return any(word in name for word in _LOWER)


def stage_progress(runs: list[Run]) -> dict[str, Any]:
    """Counts by state, and how many of `runs` are finished (in a terminal state) of how many."""
    counts = Counter(r.state for r in runs)
    done = sum(v for k, v in counts.items() if k in _TERMINAL)
    return {"counts": dict(sorted(counts.items())), "done": done, "total": len(runs)}


def campaign_summaries(src: Source) -> list[dict[str, Any]]:
    """Every campaign of a store with its counts by state and each stage's progress."""
    store = src.store
    runs = store.runs()
    out = []
    for camp in store.campaigns():
        mine = [r for r in runs if r.campaign_id == camp.id]
        stages = [
            {"index": st.index, "name": st.name, "purpose": st.purpose}
            | stage_progress([r for r in mine if r.stage_id == st.id])
            for st in store.stages(camp.id)
        ]
        running = any(r.state in _ACTIVE for r in mine)
        queued = any(r.state not in _TERMINAL for r in mine)
        out.append(
            {
                "ws": src.key,
                "id": camp.id,
                "name": camp.name,
                "goal": camp.goal,
                "created_at": camp.created_at,
                "updated_at": max((r.updated_at for r in mine), default=camp.created_at),
                # running: some run is dispatched or running; queued: only pending ones are left;
                # idle: every run is final (the leader may still plan a stage); empty: no run yet
                "status": "running" if running else "queued" if queued else "idle" if mine else "empty",
                "stages": stages,
            }
            | stage_progress(mine)
        )
    return out


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, path + "."))
        elif isinstance(value, (list, dict)):
            out[path] = json.dumps(value, sort_keys=True)
        else:
            out[path] = value
    return out


def _blueprints(store: Store, runs: list[Run]) -> dict[int, Blueprint]:
    """blueprint id -> blueprint, read once per blueprint however many seeds it has."""
    bps: dict[int, Blueprint] = {}
    for r in runs:
        if r.blueprint_id not in bps:
            bps[r.blueprint_id] = store.blueprint_of(r)
    return bps


def _heartbeat_age(att: Attempt | None, now: float) -> float | None:
    """Seconds since an active attempt last showed life (heartbeat, else start, else dispatch)."""
    if att is None or att.state not in _ACTIVE:
        return None
    return now - (att.heartbeat_at or att.started_at or att.dispatched_at)


def run_table(src: Source, campaign_id: int, now: float) -> dict[str, Any]:
    """The run table of a campaign: one row per run, the config keys that vary between its runs as
    columns, the primary metric's last and best values, and liveness from the current attempt's
    heartbeat (`late` once it is older than the workspace's stale threshold)."""
    store = src.store
    camp = store.get_campaign(campaign_id)
    runs = store.runs(campaign_id=campaign_id)
    stages = {st.id: st for st in store.stages(campaign_id)}
    bps = _blueprints(store, runs)
    configs = {
        r.id: {"task": bps[r.blueprint_id].task}
        | _flatten(bps[r.blueprint_id].effective_config(r.seed, json.loads(r.overrides)))
        for r in runs
    }
    keys = sorted({k for cfg in configs.values() for k in cfg})
    columns = [k for k in keys if len({json.dumps(cfg.get(k)) for cfg in configs.values()}) > 1]
    attempts_of = {r.id: store.attempts(r.id) for r in runs}
    by_metric: dict[str, dict[int, int]] = defaultdict(dict)
    for r in runs:
        by_metric[bps[r.blueprint_id].primary_metric][r.id] = len(attempts_of[r.id])
    series: dict[int, list[tuple[int, float | None]]] = {}
    for name, counts in by_metric.items():
        series.update(src.series.get(store, name, counts))
    steps = store.latest_steps([r.id for r in runs])
    rows = []
    for r in runs:
        bp = bps[r.blueprint_id]
        attempts = attempts_of[r.id]
        cur = next((a for a in attempts if a.id == r.current_attempt_id), None)
        points = series.get(r.id, [])
        values = [v for _s, v in points if v is not None]
        pick = min if lower_is_better(bp.primary_metric) else max
        age = _heartbeat_age(cur, now)
        step = steps.get(r.id)
        rows.append(
            {
                "id": r.id,
                "name": r.name,
                "stage": stages[r.stage_id].name,
                "stage_index": stages[r.stage_id].index,
                "state": r.state,
                "late": age is not None and age > src.stale_after_s,
                "heartbeat_age": age,
                "attempts": len(attempts),
                "host": f"{cur.host}/{cur.slot}" if cur else "",
                "seed": r.seed,
                "config": {k: configs[r.id].get(k) for k in columns},
                "metric": bp.primary_metric,
                "step": step,
                "steps": bp.budget.steps,
                "progress": min(1.0, (step + 1) / bp.budget.steps) if step is not None else 0.0,
                "last": points[-1][1] if points else None,
                "best": pick(values) if values else None,
                "failure_kind": r.failure_kind,
                "message": r.message,
                "updated_at": r.updated_at,
            }
        )
    metrics = sorted({m for bp in bps.values() for m in bp.metrics})
    return {
        "campaign": {"ws": src.key, "id": camp.id, "name": camp.name, "goal": camp.goal},
        "columns": columns,
        "metrics": metrics,
        "rows": rows,
    }


def _log_tail(store: Store, att: Attempt) -> str:
    """The attempt's log tail: the store's copy once it ended, else the live file when it is on this
    machine (a remote host's running log is only reachable through `a3r logs`)."""
    if att.log_tail or att.state not in _ACTIVE:
        return att.log_tail
    local = {h.name for h in store.hosts() if h.kind == "local"}
    path = Path(att.attempt_dir) / "log.txt"
    if att.host not in local or not path.is_file():
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
        return f.read().decode("utf-8", "replace")


def run_detail(src: Source, run_id: int, now: float) -> dict[str, Any]:
    """Everything the run page shows: the run, its blueprint and effective config, every attempt (the
    retry history), recent events, metric names and the latest attempt's log tail."""
    store = src.store
    run = store.get_run(run_id)
    camp = store.get_campaign(run.campaign_id)
    stage = next(st for st in store.stages(camp.id) if st.id == run.stage_id)
    bp = store.blueprint_of(run)
    attempts = store.attempts(run_id)
    overrides = json.loads(run.overrides)
    return {
        "campaign": {"ws": src.key, "id": camp.id, "name": camp.name},
        "stage": {"index": stage.index, "name": stage.name, "purpose": stage.purpose},
        "run": run.model_dump() | {"overrides": overrides},
        "blueprint": bp.model_dump(mode="json"),
        "config": bp.effective_config(run.seed, overrides),
        "attempts": [
            a.model_dump(exclude={"log_tail", "config_json"})
            | {"heartbeat_age": _heartbeat_age(a, now), "config": json.loads(a.config_json or "{}")}
            for a in attempts
        ],
        "events": [e.model_dump() for e in store.events(run_id=run_id, limit=100)],
        "metrics": store.metric_names(run_id) or list(bp.metrics),
        "primary_metric": bp.primary_metric,
        "log_tail": _log_tail(store, attempts[-1]) if attempts else "",
        "log_attempt": attempts[-1].number if attempts else None,
    }


def metric_export_rows(src: Source, campaign_id: int) -> list[dict[str, Any]]:
    """Every metric point of a campaign in long form (run, metric, step, value), attempts merged."""
    store = src.store
    runs = store.runs(campaign_id=campaign_id)
    names = {r.id: r.name for r in runs}
    metrics = sorted({m for bp in _blueprints(store, runs).values() for m in bp.metrics})
    rows = []
    for metric in metrics:
        for rid, points in store.metric_series_since(metric, dict.fromkeys(names)).items():
            rows.extend(
                {"run_id": rid, "run": names[rid], "metric": metric, "step": s, "value": v} for s, v in points
            )
    return rows
