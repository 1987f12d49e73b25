"""A workspace seeded through the store's real API with every shape the dashboard must show.

Layout under one root (the dashboard's --workspace):
- the root's own store: a finished two-stage campaign with a report, a live campaign (running runs with
  fresh and old heartbeats, a run that crashed and was retried, a code failure with a log tail, a
  pending run), a campaign of many runs, a campaign with no runs yet, and benchmark results;
- campaigns/second/: a second workspace's store (how `a3r research` lays campaigns out), found by
  discovery.
An empty folder (no store at all) is the empty shape.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from a3r.api import Workspace
from a3r.blueprints import Blueprint, Budget
from a3r.config import HostSpec, SchedulerConfig, WorkspaceConfig
from a3r.store import Store


def bp(
    name: str,
    *,
    seeds,
    bs: int = 8,
    lr: float = 1e-5,
    steps: int = 10,
    metrics=("reward", "loss"),
    seed_path: str | None = None,
) -> Blueprint:
    engine_config = {"pool": {"batch_size": bs}, "training": {"lr": lr}}
    if seed_path:
        engine_config["training"]["seed"] = 0
    return Blueprint(
        purpose=f"purpose of {name}",
        hypothesis="batch size matters",
        engine_config=engine_config,
        seed_path=seed_path,
        task="arithmetic",
        seeds=list(seeds),
        budget=Budget(steps=steps, wall_time_s=600),
        metrics=list(metrics),
        success_criteria="reward rises",
        launch_command="true",
        name=name,
    )


def reward(seed: int, step: int, bs: int) -> float:
    """A deterministic learning curve: bigger batches learn faster, seeds shift it a little."""
    return round(0.2 + step * 0.01 * bs / 2 + 0.01 * seed, 6)


@dataclass
class Seeded:
    root: Path
    reports: Path
    empty: Path
    ids: dict[str, int] = field(default_factory=dict)
    store: Store | None = None

    def run(self, name: str) -> int:
        return self.ids[f"run:{name}"]


def _start(store: Store, run_id: int, slot: str, run_dir: str, now: float):
    att = store.dispatch(run_id, host="local", slot=slot, run_dir=run_dir, config_json="{}", now=now)
    assert att is not None, f"run {run_id} could not be dispatched"
    assert store.mark_running(att.id, now=now)
    return att


def _points(store: Store, att, run_seed: int, bs: int, steps: range, offset: int = 0) -> int:
    pts = [(s, "reward", reward(run_seed, s, bs)) for s in steps] + [
        (s, "loss", 1.0 / (s + 1)) for s in steps
    ]
    assert store.ingest_metrics(att.id, pts, expected_offset=offset, new_offset=offset + len(pts))
    return offset + len(pts)


def eval_accuracy(seed: int, step: int, bs: int) -> float:
    """Held-out accuracy before (step 0) and after training: bigger batches end higher."""
    return 0.25 if step == 0 else round(0.4 + 0.03 * bs + 0.01 * seed, 6)


def _extra_points(store: Store, att, run_seed: int, bs: int, steps: int, offset: int) -> int:
    """Metrics a blueprint does not declare but a job logs: evaluation at the first and last step (two
    points, as in the demo) and a timing metric every step."""
    pts = [(s, "eval_accuracy", eval_accuracy(run_seed, s, bs)) for s in (0, steps)]
    pts += [(s, "step_time_s", 0.5 + 0.01 * s) for s in range(steps)]
    assert store.ingest_metrics(att.id, pts, expected_offset=offset, new_offset=offset + len(pts))
    return offset + len(pts)


def _finish(store: Store, run_id: int, att, state: str = "succeeded", **kw) -> None:
    assert store.finish_attempt(att.id, state, **kw)
    assert store.settle_run(
        run_id, att.id, state if state != "stale" else "pending", message=kw.get("reason", "")
    )


def seed_workspace(base: Path) -> Seeded:
    root, reports, empty = base / "ws", base / "reports", base / "empty"
    empty.mkdir(parents=True)
    # heartbeat every 10 min: stale after 20 min, so "fresh" heartbeats stay fresh however slow the tests
    cfg = WorkspaceConfig(
        hosts=[HostSpec(name="local", slots=64)], scheduler=SchedulerConfig(heartbeat_s=600)
    )
    ws = Workspace.create(root, cfg)
    store = ws.store
    out = Seeded(root=root, reports=reports, empty=empty, store=store)
    now = time.time()
    slot = iter(range(10_000))

    # -- a finished campaign: two stages, every run succeeded, and a report on disk --------------------
    camp = store.create_campaign("finished-study", goal="find the smallest batch size that still trains")
    out.ids["finished"] = camp.id
    for si, bs in enumerate((8, 2)):
        stage = store.create_stage(camp.id, f"stage-{si}", purpose=f"batch size {bs}")
        for r in store.add_blueprint(stage.id, bp(f"bs{bs}", seeds=(1, 2, 3), bs=bs)):
            att = _start(store, r.id, str(next(slot)), str(root / "runs" / str(r.id)), now - 100)
            _extra_points(store, att, r.seed, bs, 10, _points(store, att, r.seed, bs, range(10)))
            _finish(store, r.id, att, exit_code=0, reason="done", log_tail="training finished\n")
            out.ids[f"run:{r.name}"] = r.id
    d = reports / "finished-study"
    d.mkdir(parents=True)
    (d / "report.html").write_text(
        "<!doctype html><title>r</title><h1 id='report-title'>Report of finished-study</h1>"
    )
    (d / "report.json").write_text(
        json.dumps(
            {
                "answer": "The smallest batch size that trains is 2.",
                "conclusive": True,
                "arms": [
                    {
                        "label": f"bs={bs}",
                        "n": 3,
                        "mean": 0.5,
                        "lo": 0.4,
                        "hi": 0.6,
                        "status": "pass",
                        "run_ids": [out.ids[f"run:bs{bs}-s{seed}"] for seed in (1, 2, 3)],
                    }
                    for bs in (2, 8)
                ],
            }
        )
    )

    # -- a live campaign -------------------------------------------------------------------------------
    camp = store.create_campaign(
        "live-study", goal="does the learning rate matter? <script>alert(1)</script>"
    )
    out.ids["live"] = camp.id
    stage = store.create_stage(camp.id, "sweep", purpose="lr sweep")
    runs = store.add_blueprint(stage.id, bp("lr-hi", seeds=(1, 2, 3, 4, 5), bs=4, lr=1e-4))
    runs += store.add_blueprint(stage.id, bp("lr-lo", seeds=(1,), bs=4, lr=1e-6))
    running, retried, failed, late, pending, lo = runs
    for r in runs:
        out.ids[f"run:{r.name}"] = r.id
    # running, fresh heartbeat, metrics up to step 4, and a live log file on this machine
    att = _start(store, running.id, str(next(slot)), str(root / "runs" / str(running.id)), now)
    out.ids["running_offset"] = _points(store, att, running.seed, 4, range(5))
    out.ids["running_attempt"] = att.id
    assert store.heartbeat(att.id, now=now)
    Path(att.attempt_dir).mkdir(parents=True)
    (Path(att.attempt_dir) / "log.txt").write_text("step 4 reward 0.3\nlive log line <b>not bold</b>\n")
    # crashed (infrastructure, lost pane), retried: attempt 2 runs and has logged steps again
    att1 = _start(store, retried.id, str(next(slot)), str(root / "runs" / str(retried.id)), now - 50)
    _points(store, att1, retried.seed, 4, range(3))
    assert store.finish_attempt(att1.id, "stale", failure_kind="infrastructure", reason="tmux pane died")
    assert store.settle_run(
        retried.id,
        att1.id,
        "pending",
        message="retry after infrastructure failure",
        next_fix="infrastructure: resume from checkpoint",
    )
    att2 = _start(store, retried.id, str(next(slot)), str(root / "runs" / str(retried.id)), now)
    _points(store, att2, retried.seed, 4, range(2, 6))
    assert store.heartbeat(att2.id, now=now)
    # failed for good with a code error and its log tail
    att = _start(store, failed.id, str(next(slot)), str(root / "runs" / str(failed.id)), now - 40)
    _points(store, att, failed.seed, 4, range(2))
    assert store.finish_attempt(
        att.id,
        "failed",
        exit_code=1,
        failure_kind="code_error",
        reason="exit code 1",
        log_tail="Traceback (most recent call last):\nZeroDivisionError: division by zero\n",
    )
    assert store.settle_run(
        failed.id, att.id, "failed", failure_kind="code_error", message="code error: exit code 1"
    )
    # running but silent: its heartbeat is older than the stale threshold
    att = _start(store, late.id, str(next(slot)), str(root / "runs" / str(late.id)), now - 3600)
    assert store.heartbeat(att.id, now=now - 3600)
    # `pending` and `lo` stay pending
    del pending, lo

    # -- many runs ---------------------------------------------------------------------------------------
    camp = store.create_campaign("many-runs", goal="a wide grid")
    out.ids["many"] = camp.id
    stage = store.create_stage(camp.id, "grid")
    for bs in (2, 4, 8):
        grid = bp(f"grid-bs{bs}", seeds=range(1, 21), bs=bs, steps=8, seed_path="training.seed")
        for r in store.add_blueprint(stage.id, grid):
            att = _start(store, r.id, str(next(slot)), str(root / "runs" / str(r.id)), now - 10)
            _points(store, att, r.seed, bs, range(8))
            _finish(store, r.id, att, exit_code=0, reason="done")

    # -- a campaign with no runs yet, and benchmark results ---------------------------------------------
    out.ids["empty"] = store.create_campaign("planning-only", goal="not planned yet").id
    for i, commit in enumerate(("aaaaaaa1", "bbbbbbb2", "ccccccc3")):
        for rep in range(3):
            store.add_bench_result(
                "engine", "step_time", 1.0 + 0.5 * (i == 2) + 0.01 * rep, unit="s", commit=commit
            )
            store.add_bench_result(
                "engine", "episodes_per_s", 10.0 + i + 0.1 * rep, unit="1/s", commit=commit
            )

    # -- a second workspace, where `a3r research` puts a campaign ------------------------------------------
    ws2 = Workspace.create(root / "campaigns" / "second", WorkspaceConfig())
    camp = ws2.store.create_campaign("second-study", goal="another workspace")
    stage = ws2.store.create_stage(camp.id, "only")
    ws2.store.add_blueprint(stage.id, bp("second", seeds=(7,)))
    out.ids["second"] = camp.id
    ws2.close()
    return out


@pytest.fixture(scope="session")
def seeded(tmp_path_factory) -> Seeded:
    return seed_workspace(tmp_path_factory.mktemp("dash"))
