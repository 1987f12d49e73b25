"""Arms become validated engine jobs; the runner and CLI refuse what they cannot do, with a reason."""

from __future__ import annotations

import argparse

import pytest

from a3r.leader import CampaignError, GoalParseError, LeaderConfig, OfflinePolicy, run_campaign
from a3r.leader.blueprints import LAUNCH_COMMAND, DesignError, stage_blueprints, train_job
from a3r.leader.cli_commands import add_leader_commands
from a3r.leader.design import Arm, ResearchBudget, first_stage
from a3r.leader.goals import parse_goal
from a3r.leader.runner import resume_campaign


def test_train_job_layers_goal_arm_and_budget():
    goal = parse_goal(
        "effect of lora rank on countdown with group size 8 using gspo, and whether max tokens matters"
    )
    job = train_job(goal, Arm(x=16, level=64, seeds=[0], why="t"), steps=7)
    assert job["task"] == "countdown" and job["max_tokens"] == 64
    sw = job["swarm"]
    assert sw["lora"] == {**sw["lora"], "enabled": True, "rank": 16}
    assert sw["pool"]["group_size"] == 8 and sw["algorithm"]["policy_loss"] == "gspo"
    assert sw["algorithm"]["clip_low"] == pytest.approx(3e-4)  # the engine filled gspo's own defaults
    # a user's goal trains the real model and is scored on the held-out set by default
    assert sw["training"]["max_steps"] == 7 and job["eval_size"] == 64
    assert sw["model"]["name"] == "smollm2-135m"
    assert sw["training"]["mini_batch_size"] == sw["pool"]["batch_size"] * 8  # one update per step


def test_studied_training_steps_and_clip_ratio_reach_the_job():
    """A goal that studies the steps gives each arm its own max_steps (the stage's steps are the default);
    a clip ratio is both clip ends; both read back as the arm's value."""
    from a3r.leader.knobs import knob_value

    goal = parse_goal("how many training steps does arithmetic need: 10, 20 or 40?")
    job = train_job(goal, Arm(x=10, seeds=[0], why="t"), steps=20)
    assert job["swarm"]["training"]["max_steps"] == 10 and knob_value(job, goal.factor.key) == 10
    goal = parse_goal("best clip ratio for countdown: 0.1, 0.2 or 0.3")
    job = train_job(goal, Arm(x=0.3, seeds=[0], why="t"), steps=20)
    assert (job["swarm"]["algorithm"]["clip_low"], job["swarm"]["algorithm"]["clip_high"]) == (0.3, 0.3)
    assert knob_value(job, goal.factor.key) == 0.3 and job["swarm"]["training"]["max_steps"] == 20
    # a run length written as a setting ("max total_training_steps: 60") is the goal's steps, not a fixed knob
    g = parse_goal("smallest batch size that trains arithmetic (1 to 64); max total_training_steps: 60")
    assert g.steps == 60 and "swarm.training.max_steps" not in g.fixed


def test_invalid_arms_fail_with_the_engines_reason():
    goal = parse_goal("smallest batch size that trains arithmetic (1 to 8)")
    base = {"swarm": {"training": {"mini_batch_size": 2, "micro_batch_size": 4}}}
    with pytest.raises(DesignError, match="micro_batch_size"):
        train_job(goal, Arm(x=1, seeds=[0], why="t"), steps=2, base_job=base)


def test_stage_blueprints_one_per_arm_with_seeds_and_the_checkpoint_run_dir():
    goal = parse_goal("find the minimum batch size that still trains arithmetic (1 to 4)")
    design = first_stage(goal, ResearchBudget(steps=3, grid_points=3))
    bps = stage_blueprints(goal, design, wall_time_s=99)
    assert [bp.label for bp in bps] == ["bs=1", "bs=2", "bs=4"]
    bp = bps[0]
    assert (
        bp.seeds == [0, 1, 2] and bp.seed_path == "seed" and bp.budget.steps == 3 and bp.budget.wall_time_s == 99
    )
    assert bp.launch_command == LAUNCH_COMMAND and "$A3R_CHECKPOINT_DIR" in bp.launch_command
    assert bp.metrics == ["eval_accuracy"] and bp.effective_config(5)["seed"] == 5
    assert len({b.content_hash() for b in bps}) == 3


def test_resume_needs_an_existing_campaign(ws):
    with pytest.raises(CampaignError, match="no campaign 'ghost' to resume"):
        resume_campaign(ws, OfflinePolicy(), "ghost")


def test_a_goal_that_was_never_understood_can_be_replaced(ws, tmp_path):
    cfg = LeaderConfig(campaign="c", goal="make it better", reports_dir=str(tmp_path / "r"))
    with pytest.raises(GoalParseError):
        run_campaign(ws, OfflinePolicy(), cfg)
    # the same name with another goal starts afresh instead of clashing with the failed one
    with pytest.raises(GoalParseError, match="names no variable"):
        run_campaign(ws, OfflinePolicy(), cfg.model_copy(update={"goal": "find the smallest widget"}))
    assert ws.runs() == []


def _parser():
    p = argparse.ArgumentParser(prog="a3r")
    p.add_argument("--workspace", default=".")
    p.add_argument("--db")
    add_leader_commands(p.add_subparsers(dest="cmd", required=True))
    return p


def test_cli_research_reports_an_unparseable_goal(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A3R_WORKSPACE", raising=False)
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    args = _parser().parse_args(["research", "make the model better", "--campaign", "bad"])
    assert args.fn(args) == 2
    err = capsys.readouterr().err
    assert "cannot understand the goal" in err and "find the smallest <variable>" in err
    assert (tmp_path / "campaigns" / "bad" / "a3r.yaml").exists()  # its own workspace by default


def test_cli_options_map_to_budget_and_job():
    args = _parser().parse_args(
        [
            "research",
            "g",
            "--steps",
            "3",
            "--max-runs",
            "9",
            "--set",
            "swarm.pool.group_size=2",
            "--model",
            "tiny",
        ]
    )
    assert (args.steps, args.max_runs, args.set, args.model) == (3, 9, ["swarm.pool.group_size=2"], "tiny")
    demo = _parser().parse_args(["demo"])
    from a3r.leader.demo import DEMO_BUDGET

    assert (demo.steps, demo.grid_points, demo.max_runs, demo.max_stages) == tuple(
        DEMO_BUDGET[k] for k in ("steps", "grid_points", "max_runs", "max_stages")
    )
    assert _parser().parse_args(["resume", "x"]).campaign == "x"


def test_one_leader_per_campaign(ws, tmp_path):
    import fcntl

    from a3r.leader.runner import checkpoint_path

    lock = checkpoint_path(ws).parent / "leader-busy.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:  # another leader holds the campaign
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(CampaignError, match=r"another leader \(pid 4242\) is running campaign 'busy'"):
            resume_campaign(ws, OfflinePolicy(), "busy")
    with pytest.raises(CampaignError, match="no campaign 'busy' to resume"):  # released: on to the real check
        resume_campaign(ws, OfflinePolicy(), "busy")


def test_submit_with_the_goal_option_runs_the_leader(tmp_path, monkeypatch, capsys):
    """`a3r submit --goal "<goal>"` is the leader's goal form; without --goal, submit adds blueprints."""
    from a3r.cli import _goal_submit, main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A3R_WORKSPACE", raising=False)
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    assert _goal_submit(["submit", "--goal", "find the smallest batch size (1 to 8)"])
    assert _goal_submit(["-w", "submit", "submit", "--goal=find the smallest batch size (1 to 8)"])
    assert not _goal_submit(["submit", "find the smallest batch size (1 to 8)"])  # never guessed
    assert not _goal_submit(["submit", "a.yaml", "--campaign", "c"])
    assert not _goal_submit(["-w", "x", "runs", "--goal"])
    assert main(["submit", "--goal", "make the model better", "--campaign", "vague"]) == 2
    assert "cannot understand the goal" in capsys.readouterr().err
    assert (tmp_path / "campaigns" / "vague" / "a3r.yaml").exists()


def test_hosts_file_and_budget_overrides(tmp_path, monkeypatch, capsys):
    from a3r.api import Workspace
    from a3r.cli import main
    from a3r.leader.cli_commands import _budget_overrides

    assert _budget_overrides(["max_runs=24,wall_time_s=900", "max-stages=3"]) == {
        "max_runs": 24,
        "wall_time_s": 900,
        "max_stages": 3,
    }
    with pytest.raises(ValueError, match="KEY one of: max_stages"):
        _budget_overrides(["runs=3"])

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A3R_WORKSPACE", raising=False)
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("- name: box\n  slots: [{name: a}, {name: b}]\n")
    goal = "make the model better"
    assert main(["submit", "--goal", goal, "--campaign", "h", "--hosts", str(hosts)]) == 2
    ws = Workspace(tmp_path / "campaigns" / "h")
    assert [(h.name, [s.name for s in h.slots]) for h in ws.config.hosts] == [("box", ["a", "b"])]
    ws.close()
    capsys.readouterr()
    # A second submit may not silently ignore --hosts on the existing workspace.
    assert main(["submit", "--goal", goal, "--campaign", "h", "--hosts", str(hosts)]) == 2
    assert "--hosts applies to a new workspace" in capsys.readouterr().err
    assert main(["submit", "--goal", goal, "--campaign", "b", "--budget", "max_runs=1"]) == 2
    assert "max_runs" in capsys.readouterr().err
    hosts.write_text("- name: box\n  kind: ssh\n")
    assert main(["submit", "--goal", goal, "--campaign", "bad-hosts", "--hosts", str(hosts)]) == 2
    assert "hosts.yaml is invalid" in capsys.readouterr().err


def test_command_line_values_are_parsed_as_meant():
    from a3r.cli_values import parse_value
    from a3r.leader.cli_commands import _base_job
    from a3r.leader.demo import DEMO_SETTINGS

    assert parse_value("2e-5") == 2e-5 and isinstance(parse_value("2e-5"), float)
    assert (parse_value("8"), parse_value("true"), parse_value("gspo"), parse_value("[1, 2]")) == (
        8,
        True,
        "gspo",
        [1, 2],
    )
    demo = _parser().parse_args(["demo"])
    demo.set = [*DEMO_SETTINGS, "temperature=0.5"]  # the user's own --set comes later and wins
    job = _base_job(demo)
    assert job["swarm"]["training"]["lr"] == 1e-5 and job["temperature"] == 0.5
