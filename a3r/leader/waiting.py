"""Park-and-wake helpers shared by the graph's wait node and the runner that sleeps outside the graph.

The leader never blocks inside a node: the wait node checks its stage's runs once and, if they are not
done, parks the graph with `interrupt()`. The runner then polls the store cheaply (no checkpoint writes)
until `should_wake` says a checkpoint-worthy event happened (every run terminal, or the early-stop rung
reached) and resumes the graph.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from a3r.analysis import Question, dominated_arms, fmt, summarise_arms
from a3r.api import Workspace
from a3r.leader.goals import Goal
from a3r.leader.observe import observe
from a3r.states import RUN_TERMINAL, RunState
from a3r.store.telemetry import pid_alive

__all__ = ["early_drop", "ensure_monitor", "rung_ready", "should_wake"]


_spawned: dict[Path, int] = {}  # workspace root -> pid of the monitor this process started


def _child_running(pid: int) -> bool:
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)  # also reaps it once it has exited
    except ChildProcessError:
        return pid_alive(pid)
    return done == 0


def ensure_monitor(ws: Workspace) -> None:
    """Start the workspace's background monitor unless one is running (idempotent, cheap to call often).

    A monitor takes seconds to start before it holds the lease; spawning again meanwhile would pile up
    monitors. So the lease's live holder (`Workspace.monitor_pid`) counts as running, and so does the
    monitor this process started while it has not exited.
    """
    if ws.monitor_pid() is not None:
        return
    pid = _spawned.get(ws.root)
    if pid is not None and _child_running(pid):
        return
    _spawned[ws.root] = ws.start_monitor()


def rung_ready(ws: Workspace, arms: dict[str, list[int]], rung_step: int) -> bool:
    """Every arm has min(3, its runs) runs that succeeded or logged step `rung_step` (fewer than 3 seeds
    give a t interval too wide to stop anything)."""
    ids = [r for rids in arms.values() for r in rids]
    steps = ws.store.latest_steps(ids)
    states = ws.poll_runs(ids).states
    for rids in arms.values():
        reached = sum(1 for r in rids if states[r] == RunState.SUCCEEDED or steps.get(r, 0) >= rung_step)
        if reached < min(3, len(rids)):
            return False
    return True


def should_wake(ws: Workspace, payload: dict[str, Any]) -> bool:
    """Whether the parked graph has something to do: all runs terminal, or the early-stop rung reached."""
    if ws.poll_runs(payload["run_ids"]).done:
        return True
    rung = payload.get("rung_step")
    return bool(rung) and rung_ready(ws, payload["arms"], rung)


def early_drop(
    ws: Workspace, campaign_id: int, goal: Goal, stage: dict[str, Any], question: Question
) -> dict[str, str]:
    """Cancel the unfinished runs of arms dominated on their curves up to the rung; returns label -> why.
    The intervals are the question's own, at its per-look level (a rung is one of the planned looks)."""
    rung = stage["design"]["rung_step"]
    recs = [r for r in observe(ws, campaign_id, goal) if r.obs.stage == stage["index"]]
    partial = [
        replace(r.obs, series=tuple(p for p in r.obs.series if p[0] <= rung), state="succeeded")
        for r in recs
        if r.obs.state == RunState.SUCCEEDED or r.steps_done >= rung
    ]
    arms = summarise_arms(partial, question)
    dropped: dict[str, str] = {}
    for level in {a.level for a in arms}:
        same = [a for a in arms if a.level == level]
        best = max(same, key=lambda a: a.interval.mean)
        for a in dominated_arms(same):
            dropped[a.label] = (
                f"at step {rung} its {goal.statistic} {goal.metric} {fmt(a.interval.mean)} "
                f"[{fmt(a.interval.lo)}, {fmt(a.interval.hi)}] is below {best.label}'s "
                f"[{fmt(best.interval.lo)}, {fmt(best.interval.hi)}]"
            )
    states = ws.poll_runs(stage["run_ids"]).states
    live = [r for label in dropped for r in stage["arms"].get(label, []) if states[r] not in RUN_TERMINAL]
    if live:
        ws.cancel(live, reason="stopped early: dominated at the successive-halving rung")
    return dropped
