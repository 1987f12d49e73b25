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
from a3r.dashboard.compare import Summary, importance, score, scores_by_value
from a3r.dashboard.metric_kinds import ordered_metrics
from a3r.dashboard.sources import Source
from a3r.states import ACTIVE_ATTEMPT, RUN_TERMINAL
from a3r.store import Attempt, Run, Store

__all__ = [
    "campaign_summaries",
    "compare_view",
    "config_diff",
    "logged_metrics",
    "lower_is_better",
    "metric_export_rows",
    "run_detail",
    "run_table",
    "short_labels",
    "stage_progress",
    "steps_done",
]

_LOWER = ("loss", "error", "err_", "perplexity", "latency", "time")
_ACTIVE = {s.value for s in ACTIVE_ATTEMPT}
_TERMINAL = {s.value for s in RUN_TERMINAL}
LOG_TAIL_BYTES = 64 * 1024  # of a running attempt's log.txt


def lower_is_better(metric: str) -> bool:
    """Whether smaller values of `metric` are better (by its name; see the module docstring)."""
    name = metric.lower()
    return any(word in name for word in _LOWER)


def steps_done(last_step: int | None, budget_steps: int, state: str) -> int:
    """Training steps done, for a progress bar that never passes the budget: the highest logged step
    (engines log step k after k optimizer steps, evaluation at 0 before any), capped at the budget; a
    run that succeeded has done its budget whatever it logged last."""
    if state == "succeeded":
        return budget_steps
    return 0 if last_step is None else max(0, min(last_step, budget_steps))


def short_labels(keys: list[str]) -> dict[str, str]:
    """Dotted config keys -> the shortest trailing part that still tells them apart
    ("training.optim.lr" -> "lr" unless another key also ends in "lr")."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if sum(1 for k in keys if k == tail or k.endswith("." + tail)) == 1:
                out[key] = tail
                break
        else:
            out[key] = key
    return out


def logged_metrics(src: Source, runs: list[Run]) -> list[str]:
    """Every metric name any of `runs` logged (names of finished runs are remembered, not asked again)."""
    names: set[str] = set()
    for r in runs:
        held = src.final_metric_names.get(r.id)
        if held is None:
            held = src.store.metric_names(r.id)
            if r.state in _TERMINAL:
                src.final_metric_names[r.id] = held
        names.update(held)
    return sorted(names)


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
        done = steps_done(step, bp.budget.steps, r.state)
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
                "steps_done": done,
                "steps": bp.budget.steps,
                "progress": done / bp.budget.steps if bp.budget.steps else 0.0,
                "last": points[-1][1] if points else None,
                "best": pick(values) if values else None,
                "failure_kind": r.failure_kind,
                "message": r.message,
                "updated_at": r.updated_at,
            }
        )
    primaries = Counter(bp.primary_metric for bp in bps.values())
    primary = primaries.most_common(1)[0][0] if primaries else None
    declared = {m for bp in bps.values() for m in bp.metrics}
    metrics = ordered_metrics(declared | set(logged_metrics(src, runs)), primary)
    seed_paths = {bp.seed_path for bp in bps.values() if bp.seed_path}
    return {
        "campaign": {"ws": src.key, "id": camp.id, "name": camp.name, "goal": camp.goal},
        "columns": columns,
        "column_labels": short_labels(columns),
        # config keys that only carry the seed: not a setting to group or compare by
        "seed_columns": [c for c in columns if c in seed_paths],
        "primary_metric": primary,
        "metrics": [m["name"] for m in metrics],
        "metric_kinds": {m["name"]: m["kind"] for m in metrics},
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
    metrics = ordered_metrics(store.metric_names(run_id) or list(bp.metrics), bp.primary_metric)
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
        "metrics": [m["name"] for m in metrics],
        "metric_kinds": {m["name"]: m["kind"] for m in metrics},
        "primary_metric": bp.primary_metric,
        "log_tail": _log_tail(store, attempts[-1]) if attempts else "",
        "log_attempt": attempts[-1].number if attempts else None,
    }


def metric_export_rows(src: Source, campaign_id: int) -> list[dict[str, Any]]:
    """Every metric point of a campaign in long form (run, metric, step, value), attempts merged."""
    store = src.store
    runs = store.runs(campaign_id=campaign_id)
    names = {r.id: r.name for r in runs}
    declared = {m for bp in _blueprints(store, runs).values() for m in bp.metrics}
    metrics = sorted(declared | set(logged_metrics(src, runs)))
    rows = []
    for metric in metrics:
        for rid, points in store.metric_series_since(metric, dict.fromkeys(names)).items():
            rows.extend(
                {"run_id": rid, "run": names[rid], "metric": metric, "step": s, "value": v} for s, v in points
            )
    return rows


def _flat_config(bp: Blueprint, run: Run) -> dict[str, Any]:
    return {"task": bp.task} | _flatten(bp.effective_config(run.seed, json.loads(run.overrides)))


def compare_view(src: Source, campaign_id: int, metric: str, how: Summary) -> dict[str, Any]:
    """Runs of a campaign against their config values: each run's score on `metric` (`how`), the score
    per value of each varied config key (seed keys left out) with t intervals, and parameter importance."""
    store = src.store
    runs = store.runs(campaign_id=campaign_id)
    bps = _blueprints(store, runs)
    configs = {r.id: _flat_config(bps[r.blueprint_id], r) for r in runs}
    seed_paths = {bp.seed_path for bp in bps.values() if bp.seed_path}
    keys = sorted({k for cfg in configs.values() for k in cfg})
    varied = [
        k
        for k in keys
        if k not in seed_paths
        and len({json.dumps(cfg.get(k), sort_keys=True) for cfg in configs.values()}) > 1
    ]
    series = src.series.get(store, metric, {r.id: len(store.attempts(r.id)) for r in runs})
    scored = []
    for r in runs:
        s = score(series.get(r.id, []), how)
        if s is not None:
            scored.append(
                {"id": r.id, "name": r.name, "state": r.state, "score": s}
                | {"config": {k: configs[r.id].get(k) for k in varied}}
            )
    values = [x["score"] for x in scored]
    return {
        "metric": metric,
        "summary": how.value,
        "lower_is_better": lower_is_better(metric),
        "params": varied,
        "param_labels": short_labels(varied),
        "runs": scored,
        "unscored": len(runs) - len(scored),
        "by_param": {k: scores_by_value([x["config"][k] for x in scored], values) for k in varied if scored},
        "importance": importance({k: [x["config"][k] for x in scored] for k in varied}, values),
    }


def config_diff(src: Source, a: int, b: int) -> dict[str, Any]:
    """Two runs' flattened effective configs (plus task, seed and blueprint) and the keys that differ."""
    store = src.store
    out = {}
    for rid in (a, b):
        run = store.get_run(rid)
        bp = store.blueprint_of(run)
        out[rid] = (run, {"blueprint": bp.name, "seed": run.seed} | _flat_config(bp, run))
    (ra, ca), (rb, cb) = out[a], out[b]
    keys = sorted(set(ca) | set(cb))
    rows = [
        {"key": k, "a": ca.get(k), "b": cb.get(k), "same": json.dumps(ca.get(k)) == json.dumps(cb.get(k))}
        for k in keys
    ]
    return {
        "a": {"id": ra.id, "name": ra.name, "campaign_id": ra.campaign_id, "state": ra.state},
        "b": {"id": rb.id, "name": rb.name, "campaign_id": rb.campaign_id, "state": rb.state},
        "rows": rows,
        "differ": sum(not r["same"] for r in rows),
    }
