"""`vibe check` on real client folders: sandboxed imports (crash, timeout, memory), a dry run against a real
debug server on the tiny model, and `vibe new`'s refusals. The offline path end to end (new, check with a
training step, train) is in test_train.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vibe.check import check, load_report
from vibe.cli import main
from vibe.flags import Severity
from vibe.layout import ClientDir


def set_limits(root, **check_fields):
    text = (root / "vibe.yaml").read_text()
    (root / "vibe.yaml").write_text(text + "check: " + json.dumps(check_fields) + "\n")


def test_missing_files_and_a_client_that_fails_to_import(qa_client):
    (qa_client / "README.md").unlink()
    r = check(qa_client)
    assert r.codes(Severity.ERROR) == {"missing_files"} and "README.md" in r.errors[0].message
    (qa_client / "README.md").write_text("x")
    (qa_client / "client.py").write_text("import no_such_module_xyz\n")
    r = check(qa_client, dry_run=False)
    assert r.codes(Severity.ERROR) == {"import_failed"}
    assert "no_such_module_xyz" in r.errors[0].message and r.errors[0].detail["file"] == "client.py"
    assert json.loads((qa_client / ".vibe" / "check.json").read_text())["flags"][0]["code"] == "import_failed"


def test_an_undefined_name_in_a_function_body_is_caught_statically(qa_client):
    # an import alone would not reveal it: the name is only looked up when run() runs
    text = (qa_client / "client.py").read_text().replace("return score(", "return scroe(")
    (qa_client / "client.py").write_text(text)
    r = check(qa_client)
    assert r.codes(Severity.ERROR) == {"static_error"}
    assert "client.py:11: undefined name 'scroe'" == r.errors[0].message
    assert "dry_run" not in r.stages_run  # stopped before any server started


@pytest.mark.parametrize("family", ["qa", "tool_use", "game", "summary"])
def test_every_template_passes_the_static_stage(tmp_path, family):
    from vibe.flags import Report
    from vibe.static import static_check
    from vibe.templates import TEMPLATES_DIR

    r = Report(client=family)
    static_check(TEMPLATES_DIR / family, r)
    assert r.flags == []


def test_a_contract_function_with_the_wrong_signature_is_named(qa_client):
    (qa_client / "reward.py").write_text("def score(response):\n    return {'c': 1.0}\n")
    r = check(qa_client, dry_run=False)
    assert r.codes(Severity.ERROR) == {"import_failed"} and "score must accept (task, response)" in r.errors[0].message


def test_an_import_that_hangs_is_killed_at_the_timeout(qa_client):
    set_limits(qa_client, timeout_s=3)
    (qa_client / "client.py").write_text("while True:\n    pass\n")
    r = check(qa_client, dry_run=False)
    assert r.codes(Severity.ERROR) == {"sandbox_failed"} and "timed out after 3.0s" in r.errors[0].message


def test_an_import_that_allocates_without_bound_hits_the_memory_limit(qa_client):
    set_limits(qa_client, memory_mb=1024)
    (qa_client / "client.py").write_text("blob = bytearray(4 * 1024 ** 3)\n")
    r = check(qa_client, dry_run=False)
    assert r.codes(Severity.ERROR) == {"import_failed"} and "MemoryError" in r.errors[0].message


@pytest.mark.slow
def test_the_shipped_spy_prompt_writes_the_game_template_offline_and_it_checks(sandboxed, tmp_path, capsys, monkeypatch):
    """What the README tells a new user to run without an LLM endpoint: the spy prompt file picks the game
    template, and `vibe new` checks it (the dry run, the probes and a training step) right away."""
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    prompt = Path(__file__).resolve().parents[2] / "docs" / "prompts" / "who-is-the-spy.md"
    out = tmp_path / "spy"
    assert main(["new", "--prompt-file", str(prompt), "--out", str(out)]) == 0
    assert "offline template 'game'" in capsys.readouterr().out
    report = load_report(ClientDir.open(out))
    assert report.passed and report.stats["roles"] == ["civilian", "spy"]


@pytest.mark.parametrize("prompt", [
    "Summarise legal contracts",
    # these two were built from the arithmetic and the spy templates, without a word
    "Make the model answer yes/no questions about whether a number is prime",
    "Two players play rock-paper-scissors against each other",
])
def test_new_without_a_template_for_the_task_refuses_and_lists_what_each_trains(tmp_path, capsys, monkeypatch, prompt):
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    assert main(["new", prompt, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "no offline template trains this task" in err and "A3R_LLM_BASE_URL" in err
    assert "qa: single-turn arithmetic" in err and "game: who is the spy" in err and "--template NAME" in err
    assert not (tmp_path / "x").exists()


def test_new_refuses_a_missing_prompt_and_a_folder_in_use(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    assert main(["new", "--out", str(tmp_path / "y")]) == 2
    assert 'vibe new "<prompt>"' in capsys.readouterr().err
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "keep.txt").write_text("mine")
    assert main(["new", "arithmetic quiz questions", "--out", str(tmp_path / "z")]) == 2
    assert "not empty" in capsys.readouterr().err


@pytest.mark.slow
def test_the_spy_template_checks_adversarially_with_a_step_on_each_server(tmp_path, spy_client):
    """Roles as episodes (one group per role) and a second server for the spies: the shared mode differs
    only in putting both roles on server 1 (vibe.play.split_roles, unit-tested)."""
    root = spy_client(tmp_path / "spy", adversarial=True)
    r = check(root)
    assert r.passed, r.render()
    assert r.stats["roles"] == ["civilian", "spy"] and r.stats["groups"] == 2  # 1 task x 2 roles
    assert set(r.stats["components"]) == {"win", "describe", "total"}
    assert r.stats["max_weight_change"] > 0
    # the spies trained on a second server, which took its own step; server 1 had the civilians' only
    assert r.stats["max_weight_change_2"] > 0 and r.stats["train_step_2"]["episodes"] == 2.0
    assert r.stats["train_step"]["episodes"] == 2.0
    # the sides' rewards are complementary in every game: mean win of both groups is 0.25 (0.5 / 2)
    assert r.stats["components"]["win"]["mean"] == pytest.approx(0.25)


def test_without_a_sandbox_the_check_refuses_and_says_how_to_get_one(tmp_path, monkeypatch):
    import runpy

    import vibe.sandbox
    from vibe.templates import Family, copy_template

    qa_client = tmp_path / "client"  # written without the sandbox: this test runs where there is none
    copy_template(Family.QA, qa_client)
    data = runpy.run_path(str(qa_client / "make_data.py"))["generate"](0)  # the bundled template's own code
    (qa_client / "data").mkdir()
    for split in ("train", "test"):
        (qa_client / "data" / f"{split}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in data[split]))
    monkeypatch.setattr(vibe.sandbox.shutil, "which", lambda name: None)
    vibe.sandbox.sandbox_unavailable.cache_clear()
    try:
        r = check(qa_client)
    finally:
        vibe.sandbox.sandbox_unavailable.cache_clear()
    assert r.codes(Severity.ERROR) == {"sandbox_unavailable"} and not r.passed
    assert "apt-get install bubblewrap" in r.errors[0].message and "not checked" in r.errors[0].message
    assert "static" in r.stages_run and "dry_run" not in r.stages_run


def test_data_edited_by_hand_or_stale_against_make_data_is_an_error(qa_client):
    assert check(qa_client, dry_run=False).passed
    train = qa_client / "data" / "train.jsonl"
    lines = train.read_text().splitlines()
    edited = json.loads(lines[0]) | {"note": "edited by hand"}
    train.write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    r = check(qa_client, dry_run=False)
    assert r.codes(Severity.ERROR) == {"data_stale"}
    assert "data/train.jsonl is not what make_data.py generates" in r.errors[0].message
    assert f"run `vibe data {qa_client}`" in r.errors[0].message
    main(["data", str(qa_client)])
    assert check(qa_client, dry_run=False).passed
    (qa_client / "make_data.py").write_text((qa_client / "make_data.py").read_text() + "\n_GENERATE = generate\n"
                                            "def generate(seed):\n    return _GENERATE(seed + 1)\n")
    assert check(qa_client, dry_run=False).codes(Severity.ERROR) == {"data_stale"}


def test_train_does_not_accept_a_check_that_skipped_the_dry_run(qa_client, monkeypatch):
    """A hanging client passed `vibe check --no-dry-run` and `vibe train` took that as enough."""
    import vibe.train_session
    from vibe.exceptions import CheckFailed
    from vibe.flags import Report

    assert check(qa_client, dry_run=False).passed
    rechecked = []

    def full_check(root):
        rechecked.append(root)
        r = Report(client=str(root))
        r.add("dry_run", "episode_timeout", Severity.ERROR, "hung")
        return r

    monkeypatch.setattr(vibe.train_session, "check", full_check)
    with pytest.raises(CheckFailed, match="episode_timeout"):
        vibe.train_session.gate(ClientDir.open(qa_client), recheck=False, echo=lambda m: None)
    assert rechecked == [qa_client.resolve()]
