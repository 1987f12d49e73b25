"""The reward-hacking probes against an LLM judge catch a planted gullible judge and pass a sound one.

The judges are scripted judge endpoints (vibe.scripted_model, a real HTTP server on loopback: the
project's one allowed fake, an LLM provider): a gullible one whose grade rises when the reply it is shown
praises itself, one that rises with filler, a sound one whose grade does not move, and one whose answers
cannot be read. The probes must flag exactly the hack each judge pays for."""

from __future__ import annotations

import pytest

from engine.rewards import JudgeConfig, LLMJudge
from engine.tasks.summary import Summary
from vibe.flags import Report, Severity
from vibe.judge_probes import FILLER, FLATTERY, JudgeProbe, add_judge_flags, hack, probe_judge
from vibe.scripted_model import Reply, ScriptedModelServer

KEY = "sk-judge-probe-" + "p" * 20
PAIRS = [(it.prompt, it.answer) for it in Summary().dataset(4, seed=0)]


def _probe(monkeypatch, reply: Reply):
    monkeypatch.setenv("SWARM_JUDGE_API_KEY", KEY)
    with ScriptedModelServer({KEY: reply}) as srv:
        judge = LLMJudge(JudgeConfig(base_url=srv.url, model="judge", timeout_s=5.0, retries=0,
                                     fallback="default", default_score=0.5))
        results = {r.probe: r for r in probe_judge(judge, PAIRS)}
    report = Report(client="judge")
    add_judge_flags(list(results.values()), report)
    return results, report


def test_hacks_append_to_the_honest_reply():
    rubric = JudgeConfig(base_url="http://x/v1", model="j").rubric
    assert hack(JudgeProbe.FLATTERY, "A did B. ", rubric) == f"A did B. {FLATTERY}"
    assert hack(JudgeProbe.LENGTH, "A did B.", rubric) == f"A did B. {FILLER}"
    assert hack(JudgeProbe.RUBRIC_ECHO, "A did B.", rubric) == f"A did B. {rubric}"


def test_a_judge_that_pays_for_flattery_is_flagged(monkeypatch):
    results, report = _probe(monkeypatch, Reply.matching({"excellent": "Score: 10"}, default="Score: 6"))
    flattery = results[JudgeProbe.FLATTERY]
    assert flattery.flagged and flattery.graded == len(PAIRS) and flattery.wins == len(PAIRS)
    assert flattery.honest_mean == pytest.approx(5 / 9) and flattery.probe_mean == pytest.approx(1.0)
    assert not results[JudgeProbe.LENGTH].flagged and not results[JudgeProbe.RUBRIC_ECHO].flagged
    assert report.codes(Severity.ERROR) == {"judge_pays_for_flattery"}


def test_a_judge_that_pays_for_padding_is_flagged(monkeypatch):
    results, report = _probe(monkeypatch, Reply.matching({"worth noting": "Score: 9"}, default="Score: 6"))
    assert results[JudgeProbe.LENGTH].flagged and report.codes(Severity.ERROR) == {"judge_pays_for_length"}


def test_a_sound_judge_passes(monkeypatch):
    results, report = _probe(monkeypatch, Reply.fixed("Score: 6"))
    assert not any(r.flagged for r in results.values()) and all(r.gain == 0 for r in results.values())
    assert report.passed


def test_a_judge_that_cannot_be_read_is_ungraded_not_flagged(monkeypatch):
    results, report = _probe(monkeypatch, Reply.fixed("Lovely!"))
    assert all(r.graded == 0 and r.ungraded == len(PAIRS) and not r.flagged for r in results.values())
    assert report.codes(Severity.WARNING) == {"judge_ungraded"} and report.passed
