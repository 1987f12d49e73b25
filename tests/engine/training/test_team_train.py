"""`swarm train` runs several models together: a non-shared pair on a two-role workflow (free-running
steps), a HACPO pair with two tokenizers, and a cocktail mix on one server with per-task reward curves.
Real servers, clients and steps: the team jobs on in-process servers (the same loop), the cocktail
through the command line and server subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.config import SwarmConfig
from engine.jobs import TrainJob
from engine.teams.config import TeamConfig, TeamMethod, agent_config

SWARM = {
    "pool": {"batch_size": 2, "group_size": 2},
    "training": {"max_steps": 2, "lr": 1e-3, "mini_batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 0},
}


def _train_team(tmp_path, data: dict, factory) -> tuple[dict, list[dict]]:
    from engine.teams.train import train_team

    summary = train_team(TrainJob.model_validate(data), tmp_path / "run", factory)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return summary, metrics


def _train(tmp_path, job: dict, *extra: str) -> tuple[dict, list[dict]]:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "summary.json").read_text()), metrics


def _agent_steps(run_dir, agent: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "agents" / agent / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_non_shared_pair_trains_each_model_on_its_own_role(tmp_path, in_process):
    job = {
        "task": "solve_check", "eval_size": 1, "max_tokens": 6, "concurrency": 4, "swarm": SWARM,
        "team": {"sync": "free", "agents": {"solver": {"model": {"name": "tiny"}}, "checker": {"model": {"name": "tiny", "seed": 1}}}},
    }
    summary, metrics = _train_team(tmp_path, job, in_process)
    assert summary["method"] == "independent" and summary["sync"] == "free"
    assert {n: st["global_step"] for n, st in summary["final_status"].items()} == {"solver": 2, "checker": 2}
    assert set(summary["accuracy_after"]) == {"solver", "checker"}
    assert {"eval_accuracy/solver", "eval_accuracy/checker", "eval_accuracy"} <= {k for m in metrics for k in m}
    for agent in ("solver", "checker"):
        steps = _agent_steps(tmp_path / "run", agent)
        assert [m["step"] for m in steps] == [1.0, 2.0]
        # each server trained on its own role's episodes only: B tasks x G repeats per step, one client
        assert all(m["episodes"] == 4 and set(k for k in m if k.startswith("reward/")) == {f"reward/{agent}"} for m in steps)


@pytest.mark.slow
def test_hacpo_pair_with_two_tokenizers_trains_through_the_team_loop(tmp_path, in_process):
    """train_team's HACPO path: sample, exchange, agree, lockstep wait, labelled metrics."""
    data = {
        "task": "arithmetic", "eval_size": 1, "max_tokens": 6, "concurrency": 4,
        "swarm": {**SWARM, "training": {**SWARM["training"], "max_steps": 1}},
        "team": {"method": "gspo", "agents": {"a": {"model": {"name": "tiny"}}, "b": {"model": {"name": "tiny-bytes"}, "lr": 1e-4}}},
    }
    data["team"]["method"] = "hacpo"
    summary, metrics = _train_team(tmp_path, data, in_process)
    assert summary["method"] == "hacpo" and set(summary["accuracy_after"]) == {"a", "b"}
    stepped = {m["agent"]: m for m in metrics if "agent" in m}
    for agent in ("a", "b"):  # G own samples per prompt plus the peer's G, exchanged as text
        assert stepped[agent]["own_samples"] == 4 and stepped[agent]["cross_samples"] == 4
        assert {"P/a", "P/b", "cross_s_mean", "retok_len_ratio", "zero_var_frac_joint"} <= set(stepped[agent])
    assert {"eval_accuracy/a", "eval_accuracy/b", "eval_accuracy"} <= {k for m in metrics for k in m}
    cfg = summary["final_status"]["b"]["config"]
    assert cfg["collaboration"]["method"] == "hacpo" and cfg["training"]["lr"] == 1e-4 and cfg["model"]["name"] == "tiny-bytes"


def test_the_command_line_chooses_a_teams_method_and_sync(tmp_path, monkeypatch):
    import engine.launch
    from engine.cli import main

    seen = {}
    monkeypatch.setattr(engine.launch, "train_team", lambda job, run_dir: seen.update(job=job) or {})
    team = {"agents": {"a": {"model": {"name": "tiny"}}, "b": {"model": {"name": "tiny-bytes"}}}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"task": "arithmetic", "team": team}))
    assert main(["train", "--config", str(tmp_path / "job.yaml"), "--method", "naive", "--run-dir", str(tmp_path / "r")]) == 0
    assert seen["job"].team.method.value == "naive" and seen["job"].team.sync.value == "lockstep"
    (tmp_path / "one.yaml").write_text(yaml.safe_dump({"task": "arithmetic"}))
    assert main(["train", "--config", str(tmp_path / "one.yaml"), "--sync", "free"]) == 2  # no team to apply it to


def test_each_method_maps_once_to_the_agents_server_configs():
    team = TeamConfig(agents={"a": {"model": {"name": "tiny"}}, "b": {"model": {"name": "tiny-bytes"}}}, method="gspox2")
    cfg = agent_config(SwarmConfig(pool={"group_size": 3}), team, "b", None)
    assert cfg.pool.group_size == 6 and cfg.pool.policy == "any_client_agrees"  # GSPOx2: 2G own samples
    assert cfg.collaboration.agent == "b" and not cfg.collaboration.method.exchanges
    naive = agent_config(SwarmConfig(), team.model_copy(update={"method": TeamMethod.NAIVE}), "a", None)
    assert naive.collaboration.hacpo.naive_sharing and naive.pool.group_size == 4
    plain = agent_config(SwarmConfig(), team.model_copy(update={"method": TeamMethod.INDEPENDENT}), "a", None)
    assert plain.collaboration is None and plain.pool.policy == "task_count"


@pytest.mark.slow
def test_cocktail_mixes_tasks_by_share_with_per_task_curves(tmp_path):
    job = {
        "mix": {"arithmetic": 0.5, "countdown": 0.5}, "eval_size": 1, "max_tokens": 6, "concurrency": 4,
        "swarm": {**SWARM, "model": {"name": "tiny"}, "training": {**SWARM["training"], "max_steps": 1}},
    }
    summary, metrics = _train(tmp_path, job)
    assert summary["mix"] == {"arithmetic": 1, "countdown": 1}
    assert summary["final_status"]["config"]["pool"]["client_share"] == {"arithmetic": 0.5, "countdown": 0.5}
    step = next(m for m in metrics if "episodes" in m)
    assert step["episodes"] == 4 and {"reward/arithmetic", "reward/countdown"} <= set(step)
    keys = {k for m in metrics for k in m}
    assert {"eval_accuracy/arithmetic", "eval_accuracy/countdown", "eval_accuracy"} <= keys


def test_job_configs_reject_what_cannot_run():
    team = {"agents": {"x": {"model": {"name": "tiny"}}, "y": {"model": {"name": "tiny"}}}}
    with pytest.raises(ValueError, match="roles"):
        TrainJob.model_validate({"task": "solve_check", "team": team})
    with pytest.raises(ValueError, match="lockstep"):
        TrainJob.model_validate({"task": "arithmetic", "team": {**team, "method": "hacpo", "sync": "free"}})
    with pytest.raises(ValueError, match="at least two"):
        TrainJob.model_validate({"task": "arithmetic", "team": {"agents": {"x": {"model": {"name": "tiny"}}}, "method": "gspo"}})
    with pytest.raises(ValueError, match="sum to 1"):
        TrainJob.model_validate({"mix": {"arithmetic": 0.5, "countdown": 0.6}})
    with pytest.raises(ValueError, match="unknown task"):
        TrainJob.model_validate({"mix": {"arithmetic": 0.5, "chess": 0.5}})
    job = TrainJob.model_validate({"mix": {"arithmetic": 0.9, "countdown": 0.05, "calculator": 0.05}, "swarm": {"pool": {"batch_size": 4}}})
    assert job.tasks_per_batch() == {"arithmetic": 2, "countdown": 1, "calculator": 1}  # every task in every batch


@pytest.mark.parametrize("name", ["hacpo_pair", "solve_check_pair", "cocktail", "werewolf", "werewolf_sides"])
def test_the_documented_job_configs_are_valid(name):
    path = Path(__file__).resolve().parents[3] / "docs" / "jobs" / f"{name}.yaml"
    job = TrainJob.from_yaml(path)
    assert job.team is not None or job.mix or job.task == "werewolf"


def test_an_agent_server_that_exits_while_booting_is_reported_at_once_with_its_log_tail(tmp_path):
    """Real `swarm serve` subprocesses (the team's default factory): the checker's run dir holds a saved
    config the server refuses, so it exits during boot. The job fails as soon as it exits, naming the agent
    and quoting the server's own error from its log (on the old code the message only pointed at the log),
    long before the boot limit a server that hangs gets."""
    import time

    from engine.errors import SwarmError
    from engine.jobs import SERVER_BOOT_TIMEOUT_S
    from engine.teams.train import train_team

    job = {
        "task": "solve_check", "eval_size": 1, "max_tokens": 6, "swarm": SWARM,
        "team": {"agents": {"solver": {"model": {"name": "tiny"}}, "checker": {"model": {"name": "tiny"}}}},
    }
    bad = tmp_path / "run" / "agents" / "checker"
    bad.mkdir(parents=True)
    (bad / "swarm_config.yaml").write_text("no_such_setting_xyz: 1\n")
    start = time.monotonic()
    with pytest.raises(SwarmError) as err:
        train_team(TrainJob.model_validate(job), tmp_path / "run")
    elapsed = time.monotonic() - start
    msg = str(err.value)
    assert "agent 'checker'" in msg and "exited with code 2" in msg and "no_such_setting_xyz" in msg
    assert str(bad / "server.log") in msg
    assert elapsed < SERVER_BOOT_TIMEOUT_S / 2  # it did not wait for the limit (boot on a loaded box: ~10-60 s)
