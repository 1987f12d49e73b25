"""The LLM-judge reward: score parsing against hand-read answers, the config's invariants, and the judge
against a scripted judge endpoint on loopback (the project's one allowed fake, an LLM provider): caching,
retries, timeouts and both fallbacks, and a misconfigured endpoint stopping instead of falling back."""

from __future__ import annotations

import socket
import threading

import pytest

from engine.errors import ConfigError
from engine.rewards import (
    Fallback,
    JudgeConfig,
    JudgeUnavailable,
    LLMJudge,
    ParseMode,
    ScoreUnparseable,
    parse_score,
)
from engine.rewards.judge import JudgeMisconfigured
from engine.rewards.judge_cache import JudgeCache
from engine.rewards.judge_config import DEFAULT_EXAMPLES, JudgeExample
from engine.rewards.judge_score import judge_messages, normalise
from engine.tasks.summary import Summary
from vibe.scripted_model import Reply, ScriptedModelServer

KEY = "sk-judge-test-" + "k" * 20
CFG = JudgeConfig(base_url="http://127.0.0.1:9/v1", model="judge")


@pytest.mark.parametrize("text, score", [
    ("Score: 7", 7.0), ("score = 3", 3.0), ("The reply is fine.\nScore: **9**", 9.0), ("Score: 8/10", 8.0),
    ("I would give it 6/10.", 6.0), ("6 out of 10", 6.0), ("  4. ", 4.0), ("Score: 5. I repeat, score: 5", 5.0),
])
def test_parse_reads_a_single_in_range_score(text, score):
    assert parse_score(text, CFG) == score


@pytest.mark.parametrize("text, why", [
    ("", "no score"), ("The summary is good.", "no score"), ("Score: 3 ... no, Score: 9", "conflicting"),
    ("Score: 11", "outside"), ("Score: 0", "outside"), ("4/5", "another scale"), ("Score: 4/5", "another scale"),
])
def test_parse_refuses_what_it_cannot_read(text, why):
    with pytest.raises(ScoreUnparseable, match=why):
        parse_score(text, CFG)


def test_labelled_mode_refuses_bare_numbers_and_fractions():
    cfg = CFG.model_copy(update={"parse": ParseMode.LABELLED})
    assert parse_score("Score: 2", cfg) == 2.0
    for text in ("7", "7/10"):
        with pytest.raises(ScoreUnparseable):
            parse_score(text, cfg)


def test_normalise_maps_the_scale_onto_0_1():
    assert normalise(1, CFG) == 0.0 and normalise(10, CFG) == 1.0 and normalise(7, CFG) == pytest.approx(6 / 9)


def test_the_judge_sees_rubric_prompt_and_reply():
    msgs = judge_messages(CFG, "Summarise: X.", "X happened.")
    assert CFG.rubric in msgs[-1]["content"] and "Summarise: X." in msgs[-1]["content"] and "X happened." in msgs[-1]["content"]
    assert "1" in msgs[0]["content"] and "10" in msgs[0]["content"]


@pytest.mark.parametrize("fields, why", [
    ({"model": "j"}, "exactly one judge endpoint"),
    ({"model": "j", "base_url": "http://a/v1", "swarm_url": "http://b"}, "exactly one judge endpoint"),
    ({"model": "j", "base_url": "http://a/v1", "scale_min": 5, "scale_max": 5}, "scale_min"),
    ({"model": "j", "base_url": "http://a/v1", "fallback": "default"}, "default_score"),
    ({"model": "j", "base_url": "http://a/v1", "default_score": 0.5}, "only used with fallback=default"),
])
def test_config_invariants(fields, why):
    with pytest.raises(ValueError, match=why):
        JudgeConfig(**fields)


def test_from_env_names_the_variables_it_needs(monkeypatch):
    for k in ("SWARM_JUDGE_BASE_URL", "SWARM_JUDGE_SWARM_URL", "SWARM_JUDGE_MODEL"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ConfigError, match="SWARM_JUDGE_BASE_URL"):
        JudgeConfig.from_env()
    monkeypatch.setenv("SWARM_JUDGE_SWARM_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("SWARM_JUDGE_MODEL", "tiny")
    monkeypatch.setenv("SWARM_JUDGE_FALLBACK", "default")
    monkeypatch.setenv("SWARM_JUDGE_DEFAULT_SCORE", "0.25")
    cfg = JudgeConfig.from_env()
    assert cfg.swarm_url and cfg.fallback is Fallback.DEFAULT and cfg.default_score == 0.25
    monkeypatch.delenv("SWARM_JUDGE_ADMIN_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="SWARM_JUDGE_ADMIN_TOKEN"):
        LLMJudge(cfg)


def _judge(monkeypatch, url: str, **fields) -> LLMJudge:
    monkeypatch.setenv("SWARM_JUDGE_API_KEY", KEY)
    return LLMJudge(JudgeConfig(base_url=url, **{"model": "judge", "timeout_s": 5.0, "retries": 1, **fields}))


def test_graded_examples_come_first_as_earlier_turns_on_the_configs_scale():
    msgs = judge_messages(CFG, "Summarise: X.", "X happened.")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in msgs if m["role"] == "assistant"] == ["Score: 9", "Score: 2"]
    assert DEFAULT_EXAMPLES[0].reply in msgs[1]["content"] and DEFAULT_EXAMPLES[1].reply in msgs[3]["content"]
    assert "X happened." in msgs[-1]["content"] and "X happened." not in "".join(m["content"] for m in msgs[:-1])
    # the same fractions on a 1..5 scale: 1 + round(8/9 * 4) = 5 and 1 + round(1/9 * 4) = 1
    five = CFG.model_copy(update={"scale_max": 5})
    answers = [m["content"] for m in judge_messages(five, "p", "r") if m["role"] == "assistant"]
    assert answers == ["Score: 5", "Score: 1"] and all(parse_score(a, five) in (1, 5) for a in answers)
    one = JudgeExample(rubric="Be kind.", prompt="Greet me.", reply="Hello!", grade=0.5)
    custom = judge_messages(CFG.model_copy(update={"examples": (one,)}), "p", "r")
    assert "Be kind." in custom[1]["content"] and custom[2]["content"] == "Score: 5"  # 1 + round(4.5): Python rounds half to even
    assert [m["role"] for m in judge_messages(CFG.model_copy(update={"examples": ()}), "p", "r")] == ["system", "user"]


def test_examples_load_from_a_config_file_and_grade_nothing_the_summary_task_asks():
    cfg = JudgeConfig.model_validate({"base_url": "http://127.0.0.1:9/v1", "model": "j", "examples": [
        {"rubric": "Be kind.", "prompt": "Greet me.", "reply": "Hello!", "grade": 1.0}]})
    assert cfg.examples[0].grade == 1.0
    with pytest.raises(ValueError, match="less than or equal to 1"):
        JudgeExample(rubric="r", prompt="p", reply="x", grade=1.5)
    asked = {it.prompt for seed in (0, 1, 10000) for it in Summary().dataset(200, seed)}
    assert not asked & {ex.prompt for ex in DEFAULT_EXAMPLES}


def test_grades_are_cached_by_rubric_prompt_reply_and_model(monkeypatch, tmp_path):
    with ScriptedModelServer({KEY: Reply.fixed("Score: 8")}) as srv:
        judge = _judge(monkeypatch, srv.url, cache_path=str(tmp_path / "grades.sqlite"))
        first = judge.score("Summarise: X.", "X.")
        assert first.reward == pytest.approx(7 / 9) and first.score == 8 and not first.cached
        assert judge.score("Summarise: X.", "X.").cached and srv.calls[KEY] == 1
        judge.score("Summarise: X.", "X happened.")  # another reply
        judge.score("Summarise: Y.", "X.")  # another prompt
        assert srv.calls[KEY] == 3
        other_rubric = _judge(monkeypatch, srv.url, cache_path=str(tmp_path / "grades.sqlite"), rubric="Be brief.")
        assert not other_rubric.score("Summarise: X.", "X.").cached and srv.calls[KEY] == 4
        other_model = _judge(monkeypatch, srv.url, cache_path=str(tmp_path / "grades.sqlite"), model="judge-2")
        assert not other_model.score("Summarise: X.", "X.").cached and srv.calls[KEY] == 5
        # a grade given under other examples (other instructions) is not reused
        zero_shot = _judge(monkeypatch, srv.url, cache_path=str(tmp_path / "grades.sqlite"), examples=())
        assert not zero_shot.score("Summarise: X.", "X.").cached and srv.calls[KEY] == 6
        # the SQLite file outlives the judge: a new one (a resumed run) reuses the grade
        again = _judge(monkeypatch, srv.url, cache_path=str(tmp_path / "grades.sqlite"))
        assert again.score("Summarise: X.", "X.").cached and srv.calls[KEY] == 6
        assert len(JudgeCache(tmp_path / "grades.sqlite")) == 6


def test_unparseable_answers_are_retried_then_excluded_never_a_silent_zero(monkeypatch):
    with ScriptedModelServer({KEY: Reply.fixed("What a lovely summary!")}) as srv:
        judge = _judge(monkeypatch, srv.url, retries=2)
        with pytest.raises(JudgeUnavailable, match="3 attempt.*no score"):
            judge.score("Summarise: X.", "X.")
        assert srv.calls[KEY] == 3 and judge.counts["excluded"] == 1
        # a fallback is not cached: the next try asks again
        with pytest.raises(JudgeUnavailable):
            judge.score("Summarise: X.", "X.")
        assert srv.calls[KEY] == 6


def test_default_fallback_gives_the_documented_score_marked_as_fallback(monkeypatch):
    with ScriptedModelServer({KEY: Reply.fixed("Score: 42")}) as srv:
        judge = _judge(monkeypatch, srv.url, fallback="default", default_score=0.5)
        v = judge.score("Summarise: X.", "X.")
        assert v.reward == 0.5 and v.fallback and v.score is None and "outside the scale" in v.error
        assert srv.calls[KEY] == 2 and judge.counts["fallbacks"] == 1


def test_a_judge_that_never_answers_times_out_and_falls_back(monkeypatch):
    # a loopback listener that accepts and never answers: each attempt ends at timeout_s
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept():
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    accepted.append(listener.accept()[0])
                except OSError:
                    pass

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
            judge = _judge(monkeypatch, url, timeout_s=0.5, retries=1, fallback="default", default_score=0.3)
            v = judge.score("Summarise: X.", "X.")
            assert v.fallback and v.reward == 0.3 and "Timeout" in v.error and judge.counts["calls"] == 2
            with pytest.raises(JudgeUnavailable, match="Timeout"):
                _judge(monkeypatch, url, timeout_s=0.5, retries=0).score("Summarise: X.", "X.")
        finally:
            stop.set()
            t.join()
            for c in accepted:
                c.close()


def test_a_wrong_key_stops_the_run_instead_of_falling_back(monkeypatch):
    with ScriptedModelServer({"sk-some-other-key": Reply.fixed("Score: 8")}) as srv:
        judge = _judge(monkeypatch, srv.url, fallback="default", default_score=0.5)
        with pytest.raises(JudgeMisconfigured, match="key"):
            judge.score("Summarise: X.", "X.")
        assert judge.counts["calls"] == 1
