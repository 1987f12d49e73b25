"""Park/wake helpers: the early-stop rung (successive halving) on a synthetic stage, and a monitor that is
started once however often the leader asks."""

from __future__ import annotations

import time

from a3r.leader.blueprints import stage_blueprints
from a3r.leader.design import ResearchBudget, first_stage
from a3r.leader.goals import parse_goal
from a3r.leader.waiting import early_drop, ensure_monitor, rung_ready, should_wake
from a3r.report import question_of
from a3r.states import RunState


def _running(ws, run_id, slot, curve):
    """An attempt that has logged `curve` and is still running."""
    att = ws.store.dispatch(run_id, host="local", slot=slot, run_dir=f"/runs/{run_id}", config_json="{}")
    ws.store.mark_running(att.id)
    ws.store.ingest_metrics(
        att.id, [(s, "eval_accuracy", v) for s, v in curve], expected_offset=0, new_offset=1
    )


def test_dominated_arms_are_stopped_at_the_rung(ws):
    goal = parse_goal("best group size for arithmetic in {2, 8, 32}")
    budget = ResearchBudget(steps=4, seeds=4, max_runs=30, early_stop=True)
    design = first_stage(goal, budget)
    assert design.rung_step == 2
    camp = ws.create_campaign("sh", goal.text)
    stage = ws.create_stage(camp.id, "stage-1")
    arms = {
        bp.label: [r.id for r in ws.add_blueprints(stage.id, [bp])] for bp in stage_blueprints(goal, design)
    }
    level = {"G=2": 0.05, "G=8": 0.6, "G=32": 0.65}
    slot = 0
    for label, ids in arms.items():
        for i, rid in enumerate(ids[:3]):  # three seeds per arm have reached the rung; the fourth is queued
            slot += 1
            _running(ws, rid, str(slot), [(0, 0.02), (2, level[label] + 0.01 * i)])
    rec = {
        "index": 1,
        "design": design.model_dump(mode="json"),
        "run_ids": [r for v in arms.values() for r in v],
        "arms": arms,
    }
    assert not rung_ready(ws, arms, 3) and rung_ready(ws, arms, 2)
    payload = {"stage": 1, "run_ids": rec["run_ids"], "arms": arms, "rung_step": 2}
    assert should_wake(ws, payload) and not should_wake(ws, {**payload, "rung_step": None})

    dropped = early_drop(ws, camp.id, goal, rec, question_of(goal, budget, eval_items=64))
    assert list(dropped) == ["G=2"] and "at step 2" in dropped["G=2"] and "below G=32" in dropped["G=2"]
    states = ws.poll_runs(rec["run_ids"]).states
    assert all(states[r] == RunState.CANCELLED for r in arms["G=2"])  # running and queued seeds alike
    assert all(states[r] != RunState.CANCELLED for label in ("G=8", "G=32") for r in arms[label])


def test_ensure_monitor_starts_exactly_one(ws):
    try:
        for _ in range(5):  # the monitor needs a moment to take the lease: no second one meanwhile
            ensure_monitor(ws)
        deadline = time.monotonic() + 60
        while ws.monitor_pid() is None:
            assert time.monotonic() < deadline, "monitor never took the lease"
            time.sleep(0.2)
        pid = ws.monitor_pid()
        ensure_monitor(ws)
        time.sleep(1.0)
        assert ws.monitor_pid() == pid
        assert "holds this store's scheduler lease" not in (ws.root / ".a3r" / "monitor.log").read_text()
    finally:
        ws.stop_monitor()
