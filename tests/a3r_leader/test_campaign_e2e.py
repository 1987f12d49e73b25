"""The whole leader on the embedded machinery: real tmux workers training the tiny model, a real monitor,
the offline policy. The leader process is SIGKILLed mid-stage and resumed: no run is dispatched twice,
none is lost, and the campaign finishes with a multi-stage report. The tiny model has random weights and
cannot learn, so the honest end is the calibration's "cannot tell, because..." with advice, after one
re-pilot with twice the steps, and never a winner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from tests_support import TEST_STALE_AFTER_S, run_campaign_and_close

from a3r.api import Workspace
from a3r.config import HostSpec, SchedulerConfig, WorkspaceConfig
from a3r.leader import (
    LeaderConfig,
    OfflinePolicy,
    ResearchBudget,
    StageDesign,
    checkpoint_path,
    resume_campaign,
)
from a3r.states import RunState

LEADER = """
import json, sys
from a3r.api import Workspace
from a3r.leader import LeaderConfig, OfflinePolicy, run_campaign
ws = Workspace(sys.argv[1])
run_campaign(ws, OfflinePolicy(), LeaderConfig.model_validate(json.loads(sys.argv[2])))
"""


TINY_JOB = {
    "eval_size": 4,
    "concurrency": 4,
    "max_tokens": 8,
    "swarm": {
        "model": {"name": "tiny"},
        "pool": {"group_size": 2},
        "training": {"mini_batch_size": 4, "micro_batch_size": 4},
    },
}


def _tiny_campaign(tmp_path, campaign: str, goal: str, budget: ResearchBudget) -> tuple[Workspace, LeaderConfig]:
    """A workspace with 2 local slots and a campaign's config on the tiny model (it cannot learn)."""
    ws = Workspace.create(
        tmp_path / "ws",
        WorkspaceConfig(
            hosts=[HostSpec(name="local", slots=2)],
            scheduler=SchedulerConfig(heartbeat_s=1.0, stale_after_s=TEST_STALE_AFTER_S),
        ),
    )
    config = LeaderConfig(
        campaign=campaign,
        goal=goal,
        budget=budget,
        base_job=TINY_JOB,
        reports_dir=str(tmp_path / "reports"),
        poll_s=0.5,
    )
    return ws, config


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_campaign_survives_a_killed_leader(tmp_path):
    ws, config = _tiny_campaign(
        tmp_path,
        "e2e",
        "find the smallest batch size that still trains arithmetic (1 to 2)",
        ResearchBudget(
            max_stages=2, min_stages=2, max_runs=8, seeds=3, max_seeds=4, steps=2, grid_points=2, pilot_seeds=2
        ),
    )
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, str(ws.root), config.model_dump_json()],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not ws.runs(states=[RunState.RUNNING]):  # kill it while stage 1 is in flight
            assert leader.poll() is None, leader.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no run started"
            time.sleep(0.2)
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait()
        before = {r.id for r in ws.runs()}

        state = resume_campaign(ws, OfflinePolicy(), "e2e", timeout_s=600)

        assert state["status"] == "done"
        designs = [StageDesign.model_validate(s["design"]) for s in state["stages"]]
        assert [d.kind for d in designs] == ["calibration", "calibration"]
        assert [d.steps for d in designs] == [2, 4]  # the re-pilot doubles the steps
        # and is measured on its own runs: the 2-step pilot answers for another run length
        assert [c["runs"] for c in state["calibration"]] == [2, 2]
        runs = ws.runs()
        assert before <= {r.id for r in runs}  # nothing the killed leader created was lost
        assert len(runs) == sum(d.n_runs for d in designs)  # and nothing was created twice
        assert sorted(s.name for s in ws.store.stages(state["campaign_id"])) == ["stage-1", "stage-2"]
        for r in runs:
            assert r.state == RunState.SUCCEEDED, (r.name, r.message)
            atts = ws.attempts(r.id)
            # exactly one attempt ran to completion; any earlier one is an infrastructure retry by the plane
            assert [a.state for a in atts].count("succeeded") == 1, f"run {r.name}: {[a.state for a in atts]}"
            assert all(a.failure_kind == "infrastructure" for a in atts[:-1]), [a.reason for a in atts]
        assert sorted(rid for s in state["stages"] for rid in s["run_ids"]) == sorted(r.id for r in runs)

        md = open(state["report"]["markdown"]).read()
        html = open(state["report"]["html"]).read()
        assert "## Stage 1 (calibration)" in md and "## Stage 2 (calibration)" in md
        # the tiny model's random weights never earn a reward: no winner, a cause and advice instead
        assert "Training is not visible at this budget" in md and "`tiny`, a random-weight test fixture" in md
        assert "every run trained `tiny`" in md
        assert not json.loads(open(state["report"]["json"]).read())["conclusive"]
        for r in runs:
            assert f"\n| {r.id} | " in md
        assert "data:image/png;base64," in html
        assert json.loads(json.dumps(state["provenance"]))["engine_commit"]
        assert checkpoint_path(ws).exists() and checkpoint_path(ws) != ws.db_path
        assert ws.monitor_pid() is None  # nothing left to run: the leader stopped the monitor and tmux
        assert not any(h.server.is_alive() for h in ws.hosts.values())
        assert "holds this store's scheduler lease" not in (ws.root / ".a3r" / "monitor.log").read_text()

        again = resume_campaign(ws, OfflinePolicy(), "e2e")  # resuming a finished campaign is a no-op
        assert again["report"] == state["report"] and len(ws.runs()) == len(runs)
    finally:
        if leader.poll() is None:
            leader.kill()
        ws.stop_monitor()
        ws.shutdown()
        ws.close()


def _finished_small_campaign(
    tmp_path, campaign: str, goal: str
) -> tuple[Workspace, dict, list[StageDesign], str]:
    """A campaign on the tiny model with a small budget (2 pilot seeds, 4 steps unless the goal names them),
    run to its end: (workspace, final state, stage designs, report markdown)."""
    ws, config = _tiny_campaign(
        tmp_path, campaign, goal, ResearchBudget(max_runs=8, seeds=2, max_seeds=4, steps=4, pilot_seeds=2)
    )
    state = run_campaign_and_close(ws, OfflinePolicy(), config, timeout_s=600)
    assert state["status"] == "done"
    designs = [StageDesign.model_validate(s["design"]) for s in state["stages"]]
    return ws, state, designs, open(state["report"]["markdown"]).read()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_repilot_when_the_steps_are_studied(tmp_path):
    """Issue 25: with the training steps as the variable the reference arm (2 steps, the generous end)
    trains its own count whatever the stage's steps, so a re-pilot "with twice the steps" would rerun the
    same two runs. The leader stops after one calibration with advice that can change something: larger
    step counts, not `--steps` (the old code ran a second, identical calibration)."""
    _ws, state, designs, md = _finished_small_campaign(
        tmp_path, "steps", "What is the minimum number of training steps that still trains arithmetic: 1 or 2?"
    )
    assert [(d.kind, [a.x for a in d.arms]) for d in designs] == [("calibration", [2])]
    assert len(state["calibration"]) == 1 and not state["calibration"][0]["visible"]
    assert "Training is not visible at this budget" in md and "--steps" not in md
    assert "ask about larger step counts (e.g. 4 or 8)" in md


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_compare_whose_reference_does_not_train_pilots_the_other_value_at_the_goals_steps(tmp_path):
    """Issue 25: "... in 2 steps" names the run length, and a compare's reference failing to train says
    nothing about the other value. The leader's second calibration runs the other value on the pilot's
    seeds at the goal's 2 steps (the old code re-piloted the reference alone at 4 steps and never ran the
    other value), then stops with advice that keeps the goal's steps (no `--steps`)."""
    ws, state, designs, md = _finished_small_campaign(
        tmp_path, "compare", "Does batch size 1 or 2 train arithmetic better in 2 steps?"
    )
    assert [d.kind for d in designs] == ["calibration", "calibration"] and [d.steps for d in designs] == [2, 2]
    piloted = [(a.x, a.seeds) for d in designs for a in d.arms]
    assert sorted(piloted) == [(1, [0, 1]), (2, [0, 1])]  # both values, the same seeds, nothing twice
    assert len(ws.runs()) == 4
    cal = state["calibration"][-1]
    assert not cal["visible"] and sorted(p["label"] for p in cal["piloted"]) == ["bs=1", "bs=2"]
    assert "piloting the other values" in md and "--steps" not in md
    assert 'the goal names them ("in 2 steps"): ask with more steps (e.g. 4)' in md
    assert "Cannot tell: no tested batch size is shown to train" in md  # both were tested by then
