"""A3R's default local host on a 2-core CPU is two 1-thread slots (`a3r.config.local_host`), and each real
training run in them computes with one torch thread: real tmux workers, real `swarm train` of the tiny
model, whose training server reports `torch.get_num_threads()` (its /health, copied into summary.json)."""

from __future__ import annotations

import json

import pytest
from tests_support import TEST_STALE_AFTER_S

from a3r.api import Workspace
from a3r.config import SchedulerConfig, WorkspaceConfig, local_host
from a3r.leader.blueprints import stage_blueprints
from a3r.leader.design import Arm, StageDesign
from a3r.leader.goals import parse_goal

GOAL = parse_goal("find the smallest batch size that still trains arithmetic (1 to 2)")


@pytest.mark.timeout(600)
def test_default_slots_give_each_real_run_one_torch_thread(tmp_path):
    host = local_host(cores=2, gpu=False)  # what `a3r research` creates on a 2-core CPU host
    ws = Workspace.create(
        tmp_path / "ws",
        WorkspaceConfig(
            hosts=[host], scheduler=SchedulerConfig(
                heartbeat_s=1.0, stale_after_s=TEST_STALE_AFTER_S, start_grace_s=60.0, session_linger_s=0.0
            ),
        ),
    )
    try:
        design = StageDesign(
            index=1, kind="grid", purpose="p", hypothesis="h", arms=[Arm(x=1, seeds=[0, 1], why="w")], steps=1
        )
        base = {"eval_size": 0, "max_tokens": 4, "swarm": {"model": {"name": "tiny"}, "pool": {"group_size": 2}}}
        (bp,) = stage_blueprints(GOAL, design, base_job=base, wall_time_s=500)
        stage = ws.create_stage(ws.create_campaign("threads", GOAL.text).id, "stage-1")
        ids = [r.id for r in ws.add_blueprints(stage.id, [bp])]
        # generous: two tiny runs side by side on a loaded 2-core machine
        assert ws.wait(ids, timeout=480, drive=True) == {i: "succeeded" for i in ids}, [ws.logs(i)[-2000:] for i in ids]
        assert {ws.attempts(i)[0].slot for i in ids} == {"0", "1"}  # both slots ran one
        for i in ids:
            (summary,) = (ws.root / "runs" / str(i)).rglob("summary.json")
            assert json.loads(summary.read_text())["torch_threads"] == 1, ws.logs(i)[-2000:]
    finally:
        ws.shutdown()
        ws.close()
