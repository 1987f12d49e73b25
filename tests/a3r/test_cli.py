"""The `a3r` CLI, in-process (`main(argv)`), on a real workspace with real tmux sessions."""

import json

import pytest

from a3r.api import Workspace
from a3r.cli import main

from .conftest import job, make_bp

pytestmark = pytest.mark.tmux


@pytest.fixture
def wsdir(tmp_path):
    d = tmp_path / "campaign"
    yield d
    if (d / "a3r.yaml").exists():
        ws = Workspace(d)
        ws.shutdown()
        ws.close()


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_session(capsys, wsdir, tmp_path):
    w = ("--workspace", wsdir)
    assert run(capsys, *w, "init", "--local-slots", "2", "--heartbeat", "0.5")[0] == 0
    assert "slots" in (wsdir / "a3r.yaml").read_text()
    bp = tmp_path / "bp.yaml"
    bp.write_text(make_bp(job("--steps", "3", "--sleep", "0.05"), seeds=(1, 2), steps=3).to_yaml())
    code, out, _ = run(capsys, *w, "submit", bp, "--campaign", "cli", "--stage", "first")
    assert code == 0 and "runs [1, 2]" in out

    code, out, _ = run(capsys, *w, "runs")
    assert code == 0 and "pending" in out
    assert run(capsys, *w, "monitor", "--exit-when-idle")[0] == 0

    code, out, _ = run(capsys, *w, "runs", "--json")
    assert [r["state"] for r in json.loads(out)] == ["succeeded", "succeeded"]
    code, out, _ = run(capsys, *w, "status", "--json")
    status = json.loads(out)
    assert status["runs"] == {"succeeded": 2} and status["monitor_pid"] is None
    assert [(s["campaign"], s["stage"], s["runs"], s["done"]) for s in status["stages"]] == [
        ("cli", "first", {"succeeded": 2}, 2)
    ]
    code, out, _ = run(capsys, *w, "status")
    assert code == 0 and "cli / first" in out
    code, out, _ = run(capsys, *w, "watch", "--once")
    assert code == 0 and "succeeded: 2" in out and "100%" in out and "cli / first" in out
    code, out, _ = run(capsys, *w, "attempts", "1")
    assert code == 0 and "succeeded" in out
    code, out, _ = run(capsys, *w, "hosts", "--json")
    (host,) = json.loads(out)
    assert host["reachable"] and host["slots"] == {"0": None, "1": None}
    code, out, _ = run(capsys, "logs", "2", "-n", "5", *w)  # options also accepted after the command
    assert code == 0 and "done" in out
    code, out, _ = run(capsys, *w, "attach", "1", "--print")
    assert out.startswith("tmux -L a3r-") and "attach-session -t a3r-r1-a1" in out


def test_cli_errors(capsys, wsdir, tmp_path):
    w = ("--workspace", wsdir)
    run(capsys, *w, "init")
    bad = tmp_path / "bad.yaml"
    bad.write_text("purpose: x\nseeds: []\n")
    code, _, err = run(capsys, *w, "submit", bad)
    assert code == 1 and "invalid" in err and "seeds" in err
    code, _, err = run(capsys, *w, "submit", "--demo")
    assert code == 1 and "leader" in err
    code, _, err = run(capsys, *w, "logs", "99")
    assert code == 1 and "run 99" in err
    code, _, err = run(capsys, *w, "cancel")
    assert code == 1 and "--all" in err
    good = tmp_path / "bp.yaml"
    good.write_text(make_bp("true").to_yaml())
    run(capsys, *w, "submit", good)
    code, out, _ = run(capsys, *w, "cancel", "--all")
    assert code == 0 and "cancelled runs [1]" in out
    code, _, err = run(capsys, *w, "retry", "1", "--set", "training.lr=0.1")
    assert code == 1 and "cancelled -> pending" in err


def test_reading_a_workspace_that_does_not_exist_creates_nothing(capsys, tmp_path):
    missing = tmp_path / "typo"
    for cmd in (("status",), ("runs",), ("hosts",)):
        code, _, err = run(capsys, "--workspace", missing, *cmd)
        assert code == 1 and "no workspace at" in err and "a3r init" in err
    assert not missing.exists()


def test_an_unwritable_workspace_is_one_message(capsys, tmp_path):
    bp = tmp_path / "bp.yaml"
    bp.write_text(make_bp("true").to_yaml())
    for cmd in (("init",), ("submit", bp)):
        code, _, err = run(capsys, "--workspace", "/sys/a3r-test-ws", *cmd)
        assert code == 1 and err.startswith("a3r: error: /sys/a3r-test-ws") and "writable --workspace" in err
