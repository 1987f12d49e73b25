"""The `summary` template: one-sentence summaries of news items, rewarded by an LLM judge (vibe.judge_link).

The external judge is a real OpenAI-compatible HTTP server on loopback (vibe.scripted_model) replaying a
fixed grading rule: a reply earns 9/10 when it is one sentence naming both what happened and why (the
two halves the template's texts split over two sentences), else 2/10. The sandboxed client reaches it
only through vibe's judge service; its key never enters the sandbox."""

from __future__ import annotations

import re

import pytest

from vibe.check import check
from vibe.cli import main
from vibe.flags import Severity
from vibe.judge_client import JudgeNotConfigured, grade
from vibe.layout import ClientDir
from vibe.scripted_model import Reply, ScriptedModelServer
from vibe.templates import Family, match_family

KEY = "judge-key-123"
PROMPT = "train the model to write one-sentence summaries of short news items"


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def rule_judge(message: str) -> str:
    """The scripted judge's answer to the grading message engine.rewards.judge_score.judge_messages builds."""
    news = _between(message, "<task>", "</task>").split("\n\n", 1)[1]
    event, reason = news.split(". ")[:2]
    why = reason.removeprefix("The decision came ")
    reply = _between(message, "<reply>", "</reply>")
    one_sentence = len(re.findall(r"[.!?](?:\s|$)", reply)) == 1
    good = one_sentence and event.lower() in reply.lower() and why.lower() in reply.lower()
    return "Score: 9" if good else "Score: 2"


def gullible_judge(message: str) -> str:
    """The rule judge, except that a reply praising itself gets full marks."""
    return "Score: 10" if "excellent" in _between(message, "<reply>", "</reply>").lower() else rule_judge(message)


@pytest.fixture
def judge_env(monkeypatch):
    """Factory: start a scripted judge answering with `script`, point SWARM_JUDGE_* at it; the server."""
    servers = []

    def start(script, key: str = KEY) -> ScriptedModelServer:
        srv = ScriptedModelServer({KEY: Reply.script(script)})
        servers.append(srv)
        monkeypatch.setenv("SWARM_JUDGE_BASE_URL", srv.url)
        monkeypatch.setenv("SWARM_JUDGE_MODEL", "scripted")
        monkeypatch.setenv("SWARM_JUDGE_API_KEY", key)
        monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
        return srv

    yield start
    for srv in servers:
        srv.close()


def test_the_prompt_picks_the_summary_template_and_only_for_news():
    assert match_family(PROMPT) is Family.SUMMARY
    assert match_family("Summarise legal contracts") is None  # not what the template trains


def test_grade_outside_vibe_says_there_is_no_judge(monkeypatch):
    monkeypatch.delenv("VIBE_JUDGE_URL", raising=False)
    with pytest.raises(JudgeNotConfigured, match="judge:"):
        grade("p", "r")


def test_the_judge_service_grades_only_with_its_token(judge_env):
    """Any local process can reach a loopback port; without the service's token it must not spend the key."""
    import httpx

    from engine.rewards.judge import LLMJudge
    from engine.rewards.judge_config import JudgeConfig
    from vibe.judge_link import JudgeService

    srv = judge_env(rule_judge)
    cfg = JudgeConfig(base_url=srv.url, model="scripted")
    with JudgeService(LLMJudge(cfg)) as service:
        url = f"http://127.0.0.1:{service.port}/grade"
        body = {"prompt": "p", "reply": "r"}
        assert httpx.post(url, json=body, timeout=30).status_code == 401
        wrong = {"Authorization": "Bearer " + "x" * len(service.token)}
        assert httpx.post(url, json=body, headers=wrong, timeout=30).status_code == 401
        ok = httpx.post(url, json=body, headers={"Authorization": f"Bearer {service.token}"}, timeout=30)
        assert ok.status_code != 401, ok.text


@pytest.mark.slow
def test_vibe_new_writes_the_summary_client_with_the_judge_and_it_checks(sandboxed, tmp_path, judge_env, capsys):
    """The whole check (dataset, the judge's hack probes, reward and loop probes, dry run, training step)
    with every reward from the judge, through the sandbox."""
    srv = judge_env(rule_judge)
    out = tmp_path / "news"
    assert main(["new", PROMPT, "--out", str(out)]) == 0
    assert "offline template 'summary'" in capsys.readouterr().out
    cd = ClientDir.open(out)
    from vibe.check import load_report
    from vibe.config import VibeJob

    job = VibeJob.load(out / "vibe.yaml")
    assert job.judge.base_url == srv.url and job.judge.model == "scripted" and "what happened and why" in job.judge.rubric
    assert KEY not in (out / "vibe.yaml").read_text()  # the key stays in the environment
    report = load_report(cd)
    assert report.passed, report.render()
    assert {"probes", "loop_probes", "dry_run", "train_step"} <= {s.value for s in report.stages_run}
    assert report.stats["max_weight_change"] > 0 and report.stats["gold_mean"] == pytest.approx(8 / 9)
    # the hack probes graded 4 golds and 3 hacks of each; the sandboxed probes and dry run called it too
    assert report.stats["judge"]["graded"] == 16 and srv.calls[KEY] > 16
    # the tiny model's replies are no summaries: the judge gave them 2/10 each
    assert report.stats["components"]["judge"]["mean"] == pytest.approx(1 / 9)


def test_client_code_never_sees_the_judge_key(sandboxed, tmp_path, judge_env):
    """A reward.py that looks for the key in its environment and files: the sandboxed probes pass, so it
    found nothing, and the rewards still came from the judge."""
    judge_env(rule_judge)
    out = tmp_path / "news"
    assert main(["new", PROMPT, "--out", str(out), "--no-check"]) == 0
    (out / "reward.py").write_text(
        "import os\nfrom vibe.judge_client import grade\n\n\ndef score(task, response):\n"
        f"    assert not any({KEY!r} in v for v in os.environ.values()), 'the judge key leaked'\n"
        "    return {'judge': grade(task['prompt'], response)}\n")
    r = check(out, dry_run=False)
    assert r.passed, r.render()
    assert r.stats["gold_mean"] == pytest.approx(8 / 9)


def test_a_judge_that_pays_for_flattery_fails_the_check(sandboxed, tmp_path, judge_env):
    judge_env(gullible_judge)
    out = tmp_path / "news"
    assert main(["new", PROMPT, "--out", str(out), "--no-check"]) == 0
    r = check(out, dry_run=False)
    assert r.codes(Severity.ERROR) == {"judge_pays_for_flattery"}, r.render()


def test_a_judge_that_refuses_the_key_or_has_none_stops_the_check(sandboxed, tmp_path, judge_env, monkeypatch):
    judge_env(rule_judge, key="wrong-key")  # the server knows only KEY: every call gets 401
    out = tmp_path / "news"
    assert main(["new", PROMPT, "--out", str(out), "--no-check"]) == 0
    r = check(out, dry_run=False)
    assert r.codes(Severity.ERROR) == {"judge_unavailable"} and "refuses" in r.errors[0].message
    monkeypatch.delenv("SWARM_JUDGE_API_KEY")
    r = check(out, dry_run=False)
    assert r.codes(Severity.ERROR) == {"judge_unavailable"} and "SWARM_JUDGE_API_KEY" in r.errors[0].message


@pytest.mark.slow
def test_training_steps_are_rewarded_by_the_judge(sandboxed, tmp_path, judge_env):
    """`vibe train`'s loop (without tmux) on the tiny model: its sandboxed plays reach the judge too."""
    from tests_support import tiny_vibe_job

    from vibe.progress import read_rewards, read_status
    from vibe.training_loop import train

    srv = judge_env(rule_judge)
    out = tmp_path / "news"
    assert main(["new", PROMPT, "--out", str(out), "--no-check"]) == 0
    tiny_vibe_job(out, batch=2, group=2)
    rdir = tmp_path / "run"
    rdir.mkdir()
    train(out, rdir, steps=1)
    assert read_status(rdir)["state"] == "done"
    (row,) = read_rewards(rdir)
    assert row["episodes"] == 4 and row["components"]["judge"]["mean"] == pytest.approx(1 / 9)
    assert srv.calls[KEY] >= 1  # 4 replies, some alike: the judge's cache may answer the rest
