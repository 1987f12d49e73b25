"""Pieces of the whole-loop probes and the dry run's flat-group warning, without client code: the scripted
model over real HTTP (the openai SDK as clients use it), the judgement of played probes against hand-made
outcomes, and the cause of flat groups against hand-computed cases."""

from __future__ import annotations

import httpx
import openai
import pytest

from vibe.config import VibeJob
from vibe.dryrun import flat_message
from vibe.flags import Report, Severity
from vibe.loop_probes import GoldBudget, LoopPlay, gold_budget, judge_loop, plan_plays
from vibe.reward_probes import ProbeLimits
from vibe.scripted_model import Reply, ScriptedModelServer
from vibe.stats import FlatCause, flat_cause

LIMITS = ProbeLimits(reward_min=0.0, reward_max=1.0, gold_min=0.9, anti_gold_max=0.2)
PROMPT = 'What is 56 * 26? Say "fast". Then stop.'


def ask(url: str, key: str, content: str = PROMPT, **kw) -> str:
    with openai.OpenAI(base_url=url, api_key=key, max_retries=0) as llm:
        out = llm.chat.completions.create(model="m", messages=[{"role": "system", "content": "sys"},
                                                               {"role": "user", "content": content}], **kw)
        return out.choices[0].message.content


def test_the_scripted_model_answers_by_key_over_http():
    with ScriptedModelServer({"k-gold": Reply.fixed("1456"), "k-echo": Reply.echo(), "k-s0": Reply.span(0),
                              "k-s1": Reply.span(1), "k-s9": Reply.span(9)}) as srv:
        assert ask(srv.url, "k-gold") == "1456"
        assert ask(srv.url, "k-echo") == PROMPT
        assert (ask(srv.url, "k-s0"), ask(srv.url, "k-s1"), ask(srv.url, "k-s9")) == ("56", "26", "")
        with openai.OpenAI(base_url=srv.url, api_key="k-gold", max_retries=0) as llm:  # streamed like the SDK does
            chunks = llm.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in chunks) == "1456"
        with pytest.raises(openai.AuthenticationError):
            ask(srv.url, "k-unknown")
        assert httpx.post(srv.url + "/chat/completions", headers={"Authorization": "Bearer k-gold"},
                          content=b"not json").status_code == 400
        assert srv.calls == {"k-gold": 2, "k-echo": 1, "k-s0": 1, "k-s1": 1, "k-s9": 1}
        assert srv.sent["k-s1"] == "26"


def played(task: str, probe: str, reward: float | None, **kw) -> LoopPlay:
    p = LoopPlay(task, probe, Reply.fixed(""), calls=1, sent=kw.pop("sent", "x"), **kw)
    p.rewards = None if reward is None else {"": reward}
    return p


def judged(plays, cut=None) -> Report:
    r = Report(client="x")
    judge_loop(plays, LIMITS, 16, "smollm2-135m", cut or {}, r)
    return r


def test_a_reward_that_does_not_move_with_the_reply_is_named():
    plays = [played(t, p, 0.0) for t in ("a", "b") for p in ("gold", "garbage", "echo", "span_0")]
    r = judged(plays)
    assert r.codes(Severity.ERROR) == {"reward_ignores_output"}
    assert "the reward ignores the model's output" in r.errors[0].message and "2 probed task(s)" in r.errors[0].message
    plays[0].rewards = {"": 1.0}  # one task where the gold scores: the reward moves
    assert judged(plays).codes(Severity.ERROR) != {"reward_ignores_output"}


def test_a_gold_cut_by_the_budget_is_told_apart_from_a_low_gold():
    cut = {"a": GoldBudget(52, "After thinking about the", cut=True)}
    plays = [played("a", "gold", 0.0), played("a", "gold_uncut", 1.0), played("a", "garbage", 0.0)]
    r = judged(plays, cut)
    assert r.codes(Severity.ERROR) == {"gold_exceeds_token_budget"}
    assert "max_tokens=16" in r.errors[0].message and "52 tokens" in r.errors[0].message
    plays[1].rewards = {"": 0.0}  # the whole gold fails too: not the budget's fault
    plays.append(played("a", "echo", 0.5))
    assert judged(plays, cut).codes(Severity.ERROR) == {"loop_gold_scores_low", "loop_hackable_echo"}


def test_hackable_replies_and_a_run_that_raises_on_some_are_errors():
    plays = [played("a", "gold", 1.0), played("a", "garbage", 0.5), played("a", "echo", 0.0),
             played("a", "span_0", 1.0, sent="1456"), played("a", "span_1", None, error="ValueError: no", sent="??")]
    r = judged(plays)
    assert r.codes(Severity.ERROR) == {"loop_hackable_garbage", "loop_hackable_prompt_span", "run_raises_on_reply"}
    [raised] = [f for f in r.errors if f.code == "run_raises_on_reply"]
    assert raised.detail["frequency"] == 1 / 5 and "'??'" in raised.message
    assert "'1456'" in next(f.message for f in r.errors if f.code == "loop_hackable_prompt_span")


def test_a_game_is_judged_only_on_whether_its_reward_moves():
    def role_play(probe, a, b):
        p = played("t", probe, 0.0)
        p.rewards = {"civilian": a, "spy": b}
        return p

    assert judged([role_play("gold", 0.0, 1.0), role_play("garbage", 1.0, 0.0)]).flags == []
    assert judged([role_play("gold", 0.5, 0.5), role_play("garbage", 0.5, 0.5)]).codes() == {"reward_ignores_output"}


def test_golds_are_cut_at_max_tokens_under_the_models_tokenizer():
    [short, long], why = gold_budget(["1456", " ".join(["word"] * 40)], "tiny", 16)
    assert why is None and not short.cut and short.kept == "1456"
    assert long.cut and long.tokens >= 40 and long.kept.split() == ["word"] * len(long.kept.split())
    assert len(long.kept.split()) < 40
    _, why = gold_budget(["x"], "/no/such/model", 16)
    assert why is not None
    plays = plan_plays([{"id": "a", "prompt": "What is 2 + 3?", "gold": "5"}], [GoldBudget(1, "5")])
    assert [p.probe for p in plays] == ["gold", "garbage", "echo", "span_0", "span_1"]  # "2", "3"
    plays = plan_plays([{"id": "a", "prompt": "Hi", "gold": "a b c"}], [GoldBudget(3, "a b", cut=True)])
    assert [(p.probe, p.reply.text) for p in plays if p.probe.startswith("gold")] == [("gold", "a b"), ("gold_uncut", "a b c")]


def ep(task, total):
    return {"task_id": task, "components": {"c": total}}


@pytest.mark.parametrize("episodes, cause", [
    ([ep("a", 0.0), ep("a", 0.0), ep("b", 0.0), ep("b", 0.0)], (FlatCause.NO_REWARD, 0.0, 0.0)),
    ([ep("a", 0.5), ep("a", 0.5), ep("b", 0.5), ep("b", 0.5)], (FlatCause.SAME_REWARD, 0.5, 0.5)),
    ([ep("a", 0.0), ep("a", 0.0), ep("b", 1.0), ep("b", 1.0)], (FlatCause.NO_VARIATION, 0.0, 1.0)),
    ([ep("a", 0.0), ep("a", 1.0), ep("b", 0.0), ep("b", 0.0)], None),  # one group with signal: no warning
])
def test_flat_groups_are_reported_only_when_they_are_the_whole_run_with_the_cause(episodes, cause):
    assert flat_cause(episodes, 0.0) == cause


def test_the_flat_warning_says_plainly_when_the_base_model_earns_nothing():
    tiny = VibeJob(name="t", swarm={"model": {"name": "tiny"}})
    assert "the base model (tiny) earned 0 (reward_min) on every dry-run task" in flat_message((FlatCause.NO_REWARD, 0, 0), tiny)
    assert "--warm-start N" in flat_message((FlatCause.NO_REWARD, 0, 0), tiny)
    smol = VibeJob(name="s")  # the dry run's tiny is not the base model: say so rather than blame it
    msg = flat_message((FlatCause.NO_REWARD, 0, 0), smol)
    assert "does not show whether smollm2-135m earns any reward" in msg and "--warm-start N" in msg
    assert "temperature 1" in flat_message((FlatCause.NO_VARIATION, 0, 1), smol)
