"""`a3r research` and `a3r resume` share one error path: the same error gives the same one-line message and
exit code from both, never a traceback. `a3r submit` runs a research goal only when told so with --goal."""

from __future__ import annotations

import fcntl

import pytest

from a3r.api import Workspace
from a3r.cli import main

GOAL = "find the smallest batch size that still trains arithmetic (1 to 2)"


def _main(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return code, err


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """A fresh directory with no workspace, campaign or LLM endpoint configured."""
    monkeypatch.chdir(tmp_path)
    for var in ("A3R_WORKSPACE", "A3R_LLM_BASE_URL", "A3R_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_a_goal_the_leader_cannot_read_fails_alike_when_started_and_resumed(cwd, capsys):
    code, err = _main(capsys, "research", "make the model better", "--campaign", "vague")
    assert code == 2 and err.startswith("a3r: error: cannot understand the goal")
    assert _main(capsys, "resume", "vague") == (code, err)


def test_an_llm_endpoint_without_a_model_fails_alike_before_anything_is_created(cwd, capsys):
    url = ("--llm-base-url", "http://127.0.0.1:9/v1")
    code, err = _main(capsys, "research", GOAL, "--campaign", "c", *url)
    assert (
        code == 2 and err.startswith("a3r: error: an LLM endpoint is configured") and "A3R_LLM_MODEL" in err
    )
    assert _main(capsys, "resume", "c", *url) == (code, err)
    assert not (cwd / "campaigns").exists()


def test_resume_never_creates_a_workspace(cwd, capsys):
    code, err = _main(capsys, "resume", "nope")
    assert code == 1 and err.startswith("a3r: error: no campaign 'nope' to resume: campaigns/nope is not a")
    assert not (cwd / "campaigns").exists()
    _main(capsys, "research", "make the model better", "--campaign", "vague")
    code, err = _main(capsys, "--workspace", "campaigns/vague", "resume", "other")
    assert code == 1 and err.startswith("a3r: error: no campaign 'other' to resume in")


def test_a_timeout_and_a_busy_campaign_fail_alike_when_started_and_resumed(cwd, capsys):
    hosts = cwd / "hosts.yaml"  # a host nobody answers on: runs stay pending, nothing trains
    hosts.write_text(
        "- {name: gone, kind: ssh, address: nobody@127.0.0.1, port: 1, workdir: /tmp/a3r-gone}\n"
    )
    start = (
        "research",
        GOAL,
        "--campaign",
        "t",
        "--hosts",
        str(hosts),
        "--reports-dir",
        str(cwd / "reports"),
    )
    try:
        code, err = _main(capsys, *start, "--timeout", "1", "--steps", "2")
        assert code == 3 and err.startswith("a3r: error: stage 1 still running (")
        assert err.endswith(f"continue with `a3r --workspace {cwd / 'campaigns' / 't'} resume t`")
        assert _main(capsys, "resume", "t", "--timeout", "1") == (code, err)

        with open(cwd / "campaigns" / "t" / ".a3r" / "leader-t.lock", "a+") as held:  # another leader
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            code, err = _main(capsys, "research", GOAL, "--campaign", "t", "--steps", "2")
            assert code == 1 and err.startswith("a3r: error: another leader") and "campaign 't'" in err
            assert _main(capsys, "resume", "t") == (code, err)
    finally:
        ws = Workspace(cwd / "campaigns" / "t")
        ws.stop_monitor()
        ws.shutdown()
        ws.close()


def test_submit_runs_a_goal_only_with_the_goal_option(cwd, capsys):
    code, err = _main(capsys, "submit", "find the best learning rate between 1e-6 and 1e-4 for arithmetic")
    assert code == 2 and err.startswith("a3r: error: no such blueprint file: find the best learning rate")
    assert 'to run a research goal use `a3r submit --goal "<goal>"`' in err
    code, err = _main(capsys, "submit", "bp.yml", "--campaign", "c")  # a mistyped path
    assert code == 2 and err.startswith("a3r: error: no such blueprint file: bp.yml;")
    code, err = _main(capsys, "submit")
    assert code == 2 and "submit --goal" in err
    assert list(cwd.iterdir()) == []  # no workspace, no store, no campaign

    with pytest.raises(SystemExit) as exc:  # one form at a time: blueprint files do not mix with --goal
        main(["submit", "--goal", GOAL, "bp.yaml"])
    assert exc.value.code == 2 and "unrecognized arguments: bp.yaml" in capsys.readouterr().err
    code, err = _main(capsys, "submit", "--goal", "make the model better", "--campaign", "vague")
    assert code == 2 and err.startswith("a3r: error: cannot understand the goal")  # the leader read it


def test_a_bad_set_is_refused_naming_the_key_before_anything_is_written(cwd, capsys):
    code, err = _main(capsys, "research", GOAL, "--campaign", "b", "--set", "swarm.pool.group_size=abc")
    assert code == 2 and "swarm.pool.group_size" in err and "fix or drop that option" in err
    assert not (cwd / "campaigns").exists()  # no a3r.yaml, campaign row or leader.db to trip over later
    code, err = _main(capsys, "research", GOAL, "--campaign", "b", "--set", "swarm.bogus=1")
    assert code == 2 and "swarm.bogus" in err


def test_the_same_goal_with_other_options_is_refused_not_answered_from_the_old_campaign(cwd, capsys):
    hosts = cwd / "hosts.yaml"  # a host nobody answers on: runs stay pending, nothing trains
    hosts.write_text("- {name: gone, kind: ssh, address: nobody@127.0.0.1, port: 1, workdir: /tmp/a3r-gone}\n")
    start = ("research", GOAL, "--campaign", "o", "--hosts", str(hosts), "--reports-dir", str(cwd / "reports"))
    try:
        code, _ = _main(capsys, *start, "--timeout", "1", "--steps", "2")
        assert code == 3  # parked, resumable
        code, err = _main(capsys, "research", GOAL, "--campaign", "o", "--steps", "30", "--model", "tiny", "--timeout", "1")
        assert code == 1 and "already exists with other options" in err
        assert "budget.steps: 2 -> 30" in err and "base_job.swarm.model.name: 'smollm2-135m' -> 'tiny'" in err
        assert "new --campaign name" in err
        # The same options continue it (a leader killed mid-campaign is resumed this way).
        code, err = _main(capsys, "research", GOAL, "--campaign", "o", "--steps", "2", "--timeout", "1")
        assert code == 3, err
    finally:
        ws = Workspace(cwd / "campaigns" / "o")
        ws.stop_monitor()
        ws.shutdown()
        ws.close()


@pytest.mark.parametrize("name", ["../outside", "a/b", ".hidden"])
def test_a_campaign_name_that_is_not_one_path_component_is_refused(cwd, capsys, name):
    code, err = _main(capsys, "research", GOAL, "--campaign", name)
    assert code == 2 and "is not allowed" in err and "--campaign" in err
    assert _main(capsys, "resume", name)[0] == 2
    assert list(cwd.iterdir()) == [] and not (cwd.parent / "outside").exists()
