"""A failed run's classified failure reaches the LLM policy, whose checked revision is what the retry runs:
real tmux workers, a real store, the scripted OpenAI-compatible endpoint. At most one revision per run,
and a leader that dies between recording a revision and re-queueing the run finishes it without asking
again."""

from __future__ import annotations

import json
import sys

import pytest
from tests_support import TEST_STALE_AFTER_S

from a3r.api import Workspace
from a3r.config import HostSpec, SchedulerConfig, WorkspaceConfig
from a3r.leader.blueprints import stage_blueprints
from a3r.leader.design import Arm, StageDesign
from a3r.leader.goals import parse_goal
from a3r.leader.llm import LLMPolicy
from a3r.leader.recovery import FailedRun, check_changes, revise_failed_runs, revisions
from a3r.states import FailureKind, RunState

GOAL = parse_goal("find the smallest batch size that still trains arithmetic (1 to 2)")

# Fails like a job handed a setting it cannot work with; the classifier calls that a code error.
JOB = """
import json, os, sys, yaml
cfg = yaml.safe_load(open("config.yaml"))
print(f"job: max_tokens={cfg['max_tokens']} seed={cfg['seed']}")
if cfg["max_tokens"] < 8:
    sys.exit(f"ValueError: max_tokens={cfg['max_tokens']} is too short for an arithmetic answer")
with open(os.environ["A3R_METRICS_FILE"], "a") as m:
    for step in range(int(os.environ["A3R_BUDGET_STEPS"])):
        m.write(json.dumps({"step": step, "reward_mean": 0.5}) + "\\n")
"""


@pytest.fixture
def tmux_ws(tmp_path):
    """A workspace with two local tmux slots and fast clocks."""
    cfg = WorkspaceConfig(
        hosts=[HostSpec(name="local", slots=2)],
        scheduler=SchedulerConfig(
            heartbeat_s=0.5,
            stale_after_s=TEST_STALE_AFTER_S,
            start_grace_s=15.0,
            session_linger_s=0.0,
            kill_grace_s=1.0,
        ),
    )
    ws = Workspace.create(tmp_path / "ws", cfg)
    yield ws
    ws.shutdown()
    ws.close()


def _stage(ws: Workspace, tmp_path) -> list[int]:
    """One arm (bs=1), seeds 0 and 1, on the tiny model with max_tokens 4, run by JOB."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    design = StageDesign(
        index=1, kind="grid", purpose="p", hypothesis="h", arms=[Arm(x=1, seeds=[0, 1], why="w")], steps=2
    )
    base = {"eval_size": 0, "max_tokens": 4, "swarm": {"model": {"name": "tiny"}}}
    (bp,) = stage_blueprints(GOAL, design, base_job=base, wall_time_s=60)
    bp = bp.model_copy(update={"launch_command": f"{sys.executable} {job}"})
    camp = ws.create_campaign("rec", GOAL.text)
    stage = ws.create_stage(camp.id, "stage-1")
    return [r.id for r in ws.add_blueprints(stage.id, [bp])]


def _policy(server, said: list[str]) -> LLMPolicy:
    return LLMPolicy(base_url=server.url, api_key="k", model="fake-model", skills="", echo=said.append)


def _changes(**kw) -> str:
    return json.dumps({"changes": kw})


def test_the_policy_sees_the_failure_and_its_revision_is_what_the_retry_runs(
    tmux_ws, tmp_path, fake_llm, monkeypatch
):
    ws = tmux_ws
    a, b = _stage(ws, tmp_path)
    states = ws.wait([a, b], timeout=60, drive=True)
    assert states == {a: RunState.FAILED, b: RunState.FAILED}, ws.attempts(a)
    srv = fake_llm(
        [
            _changes(**{"swarm.pool.batch_size": 2}),  # the studied variable: refused, the reason fed back
            _changes(**{"max tokens": 16}),  # run a: an alias, becomes its key
            _changes(max_tokens=6),  # run b: still too short, so its retry fails again
        ]
    )
    said: list[str] = []
    policy = _policy(srv, said)

    def killed(*_a, **_kw):
        raise RuntimeError("leader killed")

    monkeypatch.setattr(ws, "retry", killed)  # the leader dies after recording run a's revision
    with pytest.raises(RuntimeError, match="leader killed"):
        revise_failed_runs(ws, policy, GOAL, [a, b])
    monkeypatch.undo()
    assert len(srv.requests) == 2 and ws.run(a).state == RunState.FAILED

    lines = revise_failed_runs(ws, policy, GOAL, [a, b])  # the wait node re-runs: a from its record
    assert len(srv.requests) == 3 and said == []
    assert lines == [
        f"run {a} (bs=1, seed 0) failed with code_error (job exited with status 1 (code_error)); "
        "llm:fake-model set max_tokens 4 -> 16 and re-queued it",
        f"run {b} (bs=1, seed 1) failed with code_error (job exited with status 1 (code_error)); "
        "llm:fake-model set max_tokens 4 -> 6 and re-queued it",
    ]
    prompt = srv.requests[0]["body"]["messages"][1]["content"]
    assert "Failure kind (classified from the exit status and the log): code_error" in prompt
    assert "max_tokens=4 is too short for an arithmetic answer" in prompt  # the log tail
    assert "Rule fix the scheduler suggests: none applies" in prompt and "max_tokens=4" in prompt
    assert "Never change the studied variables (swarm.pool.batch_size)" in prompt
    assert "studied variable" in srv.requests[1]["body"]["messages"][-1]["content"]
    assert revise_failed_runs(ws, policy, GOAL, [a, b]) == []  # queued: nothing to do

    states = ws.wait([a, b], timeout=60, drive=True)
    assert states == {a: RunState.SUCCEEDED, b: RunState.FAILED}
    assert revise_failed_runs(ws, policy, GOAL, [a, b]) == [] and len(srv.requests) == 3  # once per run
    for rid, tokens in ((a, 16), (b, 6)):
        first, retry = ws.attempts(rid)
        assert json.loads(first.config_json)["max_tokens"] == 4
        assert json.loads(retry.config_json)["max_tokens"] == tokens and retry.retry_of == first.id
        assert retry.fix == (
            f"revised by llm:fake-model after code_error: max_tokens 4 -> {tokens}: "
            f'overrides {{"max_tokens":{tokens}}}'
        )
        assert f"job: max_tokens={tokens} seed={rid - a}" in ws.logs(rid)  # the job ran the revision
    assert [(r.run_id, r.before, r.after) for r in revisions(ws, [b, a])] == [
        (a, {"max_tokens": 4}, {"max_tokens": 16}),
        (b, {"max_tokens": 4}, {"max_tokens": 6}),
    ]


def test_a_declined_revision_is_recorded_and_never_asked_again(ws, record, fake_llm):
    design = StageDesign(
        index=1, kind="grid", purpose="p", hypothesis="h", arms=[Arm(x=2, seeds=[0], why="w")], steps=2
    )
    camp = ws.create_campaign("dec", GOAL.text)
    stage = ws.create_stage(camp.id, "stage-1")
    (run,) = ws.add_blueprints(stage.id, stage_blueprints(GOAL, design))
    record(ws, run.id, [(0, 0.1)], outcome="failed")
    srv = fake_llm([_changes()])
    policy = _policy(srv, [])
    assert revise_failed_runs(ws, policy, GOAL, [run.id]) == []
    assert revise_failed_runs(ws, policy, GOAL, [run.id]) == [] and len(srv.requests) == 1
    (rev,) = revisions(ws, [run.id])
    assert rev.after == {} and rev.describe().endswith("llm:fake-model proposed no change")
    assert ws.run(run.id).state == RunState.FAILED


def _failed(config: dict) -> FailedRun:
    return FailedRun(
        run_id=1,
        name="bs=1-s0",
        arm="bs=1",
        seed=0,
        attempt=1,
        failure_kind=FailureKind.CODE_ERROR,
        reason="r",
        log_tail="",
        suggested_fix=None,
        scheduler_note="",
        fixes_tried=(),
        config=config,
    )


def test_changes_are_knobs_with_valid_new_values():
    design = StageDesign(
        index=1, kind="grid", purpose="p", hypothesis="h", arms=[Arm(x=1, seeds=[0], why="w")], steps=2
    )
    (bp,) = stage_blueprints(GOAL, design, base_job={"eval_size": 0, "max_tokens": 4})
    run = _failed(bp.effective_config(0))
    assert check_changes(GOAL, run, {"lr": "3e-5", "max tokens": 8}) == {
        "swarm.training.lr": 3e-5,
        "max_tokens": 8,
    }
    for changes, why in (
        ({"swarm.pool.widgets": 1}, "unknown variable 'swarm.pool.widgets'"),
        ({"max_tokens": 2.5}, "whole number"),
        ({"max_tokens": 0}, "must be >= 1"),
        ({"max_tokens": 4}, "already 4 in the failed run"),
        ({"batch size": 2}, "studied variable"),
        ({"policy loss": "gspo"}, "not a valid engine job: .*would never clip"),
    ):
        with pytest.raises(ValueError, match=why):
            check_changes(GOAL, run, changes)
