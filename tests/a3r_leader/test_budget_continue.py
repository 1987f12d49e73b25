"""A campaign its budget stopped continues with a larger one (`a3r resume C --budget ...`), reusing every
finished run: the real leader graph, checkpointer, store and command line, with the runs recorded the way a
worker records them (conftest's `record`). No monitor runs: the test holds the scheduler lease for a
process it owns, so nothing but the test itself dispatches the runs.

Issue 25: a user's campaign ended "Cannot tell: the budget is spent before any comparison ... rerun with
--budget total_wall_s=3060"; rerunning recalibrated from scratch and ended the same way.
"""

from __future__ import annotations

import argparse
import subprocess

import pytest

from a3r.leader import LeaderConfig, OfflinePolicy, ResearchBudget, resume_campaign, run_campaign
from a3r.leader.cli_commands import ExitCode, add_leader_commands
from a3r.states import RunState

GOAL = "Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?"
FINAL = {1.5e-5: 0.6, 3e-6: 0.3, 6e-5: 0.35}  # held-out accuracy at the end; 0.2 untrained


@pytest.fixture
def hold_lease(ws):
    """Hold the workspace's scheduler lease for a process of our own (a monitor's place), so the leader
    starts no monitor; call again after a report, whose cleanup stops the holder."""
    procs: list[subprocess.Popen] = []

    def hold() -> None:
        procs.append(subprocess.Popen(["sleep", "600"]))
        ws.store.acquire_lease(ttl_s=3600, pid=procs[-1].pid)

    yield hold
    for p in procs:
        p.kill()
        p.wait()


def _record_pending(ws, record) -> list[int]:
    ids = []
    for run in ws.runs(states=[RunState.PENDING]):
        x = ws.store.blueprint_of(run).engine_config["swarm"]["training"]["lr"]
        record(ws, run.id, [(0, 0.2), (4, FINAL[x] + 0.02 * run.seed)])
        ids.append(run.id)
    return ids


def _attempts(ws) -> dict[int, list[int]]:
    return {r.id: [a.id for a in ws.attempts(r.id)] for r in ws.runs()}


def test_a_budget_stopped_campaign_continues_with_a_larger_budget_and_reruns_nothing(
    ws, record, hold_lease, tmp_path, capsys
):
    config = LeaderConfig(
        campaign="lr",
        goal=GOAL,
        budget=ResearchBudget(max_runs=4, max_stages=1, min_stages=1, steps=4, seeds=3, max_seeds=3),
        base_job={"eval_size": 64, "swarm": {"model": {"name": "smollm2-135m"}}},
        reports_dir=str(tmp_path / "reports"),
        poll_s=0.1,
    )
    policy = OfflinePolicy()
    hold_lease()
    with pytest.raises(TimeoutError):  # the calibration is dispatched; its runs are ours to record
        run_campaign(ws, policy, config, timeout_s=1)
    calibration = _record_pending(ws, record)
    assert len(calibration) == 3

    state = resume_campaign(ws, policy, "lr")
    assert state["status"] == "done" and len(ws.runs()) == 3
    verdict = state["stages"][-1]["verdict"]
    # 4 runs hold the pilot and 1 more; the grid needs 2 new values x 3 seeds (the reference is pooled)
    assert "Cannot tell: the budget is spent before any comparison" in verdict
    assert "`a3r resume lr --budget max_runs=9`" in verdict
    before = _attempts(ws)

    hold_lease()  # the report stopped the holder
    parser = argparse.ArgumentParser(prog="a3r")
    parser.add_argument("--workspace", default=".")
    parser.add_argument("--db")
    add_leader_commands(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(
        ["--workspace", str(ws.root), "resume", "lr", "--budget", "max_runs=9", "--offline", "--timeout", "1"]
    )
    assert args.fn(args) == ExitCode.TIMEOUT  # the grid is dispatched and waits for its runs
    assert "campaign lr: continuing with max_runs=9" in capsys.readouterr().out
    pending = ws.runs(states=[RunState.PENDING])
    grid = {(ws.store.blueprint_of(r).engine_config["swarm"]["training"]["lr"], r.seed) for r in pending}
    assert grid == {(x, s) for x in (3e-6, 6e-5) for s in range(3)}  # the pilot's arm is pooled, not rerun
    assert {rid: a for rid, a in _attempts(ws).items() if rid in before} == before  # no new attempt
    _record_pending(ws, record)

    state = resume_campaign(ws, policy, "lr")
    assert state["status"] == "done" and [s["design"]["kind"] for s in state["stages"]] == ["calibration", "grid"]
    assert len(state["calibration"]) == 1  # the pilot is measured once, not again on continuing
    runs = ws.runs()
    assert len(runs) == 9 and all(r.state == RunState.SUCCEEDED for r in runs)
    assert all(len(a) == 1 for a in _attempts(ws).values())  # every run ran exactly once
    assert state["stages"][-1]["verdict"].startswith("Best learning rate: 1.5e-05")
    assert state["continued"][0]["budget"] == {"max_runs": 9}


def test_budget_only_continues_a_finished_campaign(ws, hold_lease, tmp_path):
    config = LeaderConfig(
        campaign="busy",
        goal=GOAL,
        budget=ResearchBudget(max_runs=4, max_stages=1, min_stages=1, steps=4),
        base_job={"eval_size": 64, "swarm": {"model": {"name": "smollm2-135m"}}},
        reports_dir=str(tmp_path / "reports"),
        poll_s=0.1,
    )
    hold_lease()
    with pytest.raises(TimeoutError):
        run_campaign(ws, OfflinePolicy(), config, timeout_s=1)
    with pytest.raises(Exception, match="has not finished .* resume it without --budget"):
        resume_campaign(ws, OfflinePolicy(), "busy", budget={"max_runs": 9})
    assert len(ws.runs()) == 3
