"""`vibe new` with an LLM endpoint, against a scripted OpenAI-compatible server (the only fake: the LLM
provider). Its first client has a bug the repair loop must fix; its second has a hackable reward the
probes must catch; the third is sound."""

from __future__ import annotations

import json

import pytest

from vibe.cli import main
from vibe.templates import TEMPLATES_DIR

QA = {p.name: p.read_text() for p in (TEMPLATES_DIR / "qa").iterdir() if p.is_file()}

BUGGY_CLIENT = QA["client.py"].replace("from reward import score", "from reward import scorer")  # a typo
HACKABLE_REWARD = "def score(task, response):\n    return {'correct': 1.0 if response.strip() else 0.0}\n"


def reply(files: dict[str, str], notes: str) -> str:
    return json.dumps({"files": files, "notes": notes})


@pytest.mark.slow
def test_the_repair_loop_fixes_a_bug_then_a_hackable_reward(fake_llm, sandboxed, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("A3R_LLM_API_KEY", "sk-test-vibe")
    srv = fake_llm([
        "not json at all",  # a malformed answer is fed back and asked again
        reply({**QA, "client.py": BUGGY_CLIENT}, "first version"),
        reply({"client.py": QA["client.py"], "reward.py": HACKABLE_REWARD}, "fix the import"),
        reply({"reward.py": QA["reward.py"]}, "reward only the right number"),
    ])
    out = tmp_path / "gen"
    code = main(["new", "Answer arithmetic questions", "--out", str(out), "--llm-base-url", srv.url,
                 "--llm-model", "coder", "--rounds", "3"])
    said = capsys.readouterr().out
    assert code == 0, said
    rounds = sorted((out / ".vibe" / "rounds").iterdir())
    assert [r.name for r in rounds] == ["round-0", "round-1", "round-2"]
    r0, r1, r2 = (json.loads((r / "check.json").read_text()) for r in rounds)
    assert {f["code"] for f in r0["flags"] if f["severity"] == "error"} == {"static_error"}
    assert "client.py:11: undefined name 'score'" in r0["flags"][0]["message"]  # caught before any import
    assert {"hackable_garbage", "hackable_repeat_prompt"} <= {f["code"] for f in r1["flags"]}
    assert not [f for f in r2["flags"] if f["severity"] == "error"]
    assert "-from reward import scorer\n+from reward import score\n" in (rounds[1] / "diff.patch").read_text()
    assert "response.strip()" in (rounds[2] / "diff.patch").read_text()
    assert (out / "data" / "train.jsonl").is_file() and "PASSED" in said

    bodies = [r["body"] for r in srv.requests]
    assert all(r["auth"] == "Bearer sk-test-vibe" for r in srv.requests)
    system = bodies[0]["messages"][0]["content"]
    assert "client.py        `run(llm, model, task, sampling)" in system and "name: write-swarm-client" in system
    assert "That answer is invalid" in bodies[1]["messages"][-1]["content"]
    repair_1 = bodies[2]["messages"][-1]["content"]
    assert "static_error" in repair_1 and "undefined name 'score'" in repair_1 and "from reward import scorer" in repair_1
    assert "hackable_repeat_prompt" in bodies[3]["messages"][-1]["content"]


def test_repair_rounds_are_bounded_and_unsafe_paths_are_refused(fake_llm, sandboxed, tmp_path, capsys):
    bad_path = reply({"../escape.py": "x = 1"}, "")
    broken = reply({"client.py": "def run(:\n"}, "")
    srv = fake_llm([bad_path, broken, broken])
    out = tmp_path / "gen"
    code = main(["new", "quiz", "--out", str(out), "--llm-base-url", srv.url, "--llm-model", "m", "--rounds", "1"])
    assert code == 1
    assert not (tmp_path / "escape.py").exists()
    assert "must be relative, inside the folder" in srv.requests[1]["body"]["messages"][-1]["content"]
    assert sorted(p.name for p in (out / ".vibe" / "rounds").iterdir()) == ["round-0", "round-1"]
    assert "FAILED" in capsys.readouterr().out
