"""ContextTracker: one timeline per choice, exact sampled ids/logprobs, call order, serialisation."""

from __future__ import annotations

import json

import pytest

from engine.backends.base import Completion
from engine.tracking.chat import render_prompt
from engine.tracking.tracker import ContextTracker
from engine.types import Author


def test_one_timeline_per_choice_with_the_sampled_block_last(tok):
    rendered = render_prompt(tok, [{"role": "user", "content": "2+2?"}])
    eos = tok.eos_token_id
    a = Completion([34, eos], [-0.5, -0.1], "stop", "4")
    b = Completion([20, 21, 22], [-1.0, -2.0, -3.0], "length", "abc")
    tracker = ContextTracker()
    out = tracker.record_call(rendered, [a, b])
    assert len(out) == 2 and tracker.timelines == out
    assert {t.call_index for t in out} == {0}
    for t, c in zip(out, [a, b], strict=True):
        assert [x.text for x in t.blocks[:-1]] == [x.text for x in rendered.blocks]
        last = t.blocks[-1]
        assert (last.author, last.trainable, last.token_ids, last.logprobs) == (
            Author.LLM,
            True,
            c.token_ids,
            c.logprobs,
        )
        assert t.token_ids == rendered.token_ids + c.token_ids
    assert out[0].blocks[-1].text == "4" + tok.decode([eos])  # ended with end-of-turn: its text is appended
    assert out[1].blocks[-1].text == "abc"  # cut by length: no end-of-turn
    out[0].blocks[0].token_ids.append(999)  # timelines never share block lists
    assert (
        out[1].blocks[0].token_ids
        == rendered.blocks[0].token_ids
        == rendered.token_ids[: len(rendered.blocks[0].token_ids)]
    )


def test_call_order_and_loss_mask_alignment(tok, sim):
    m = [{"role": "user", "content": "Hi"}]
    sim.step(m, "Hello.")
    m += [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    sim.step(m, ["Bye!", "See you."])
    tl = sim.tracker.timelines
    assert [t.call_index for t in tl] == [0, 1, 1] and sim.tracker.n_calls == 2
    for t in tl:
        assert len(t.loss_mask) == len(t.token_ids) == len(t.logprobs) == t.n_tokens
        sampled = t.blocks[-1]
        assert t.loss_mask == [0] * (t.n_tokens - len(sampled.token_ids)) + [1] * len(sampled.token_ids)
        assert t.logprobs[-len(sampled.token_ids) :] == sampled.logprobs
        assert all(lp == 0.0 for lp, m_ in zip(t.logprobs, t.loss_mask, strict=True) if not m_)


def test_misaligned_logprobs_are_rejected(tok):
    rendered = render_prompt(tok, [{"role": "user", "content": "x"}])
    tracker = ContextTracker()
    with pytest.raises(ValueError, match="2 token ids but 1 logprobs"):
        tracker.record_call(rendered, [Completion([1, 2], [-1.0], "stop", "")])
    assert tracker.timelines == [] and tracker.n_calls == 0


def test_empty_completion_adds_no_llm_block(tok):
    rendered = render_prompt(tok, [{"role": "user", "content": "x"}])
    (t,) = ContextTracker().record_call(rendered, [Completion([], [], "length", "")])
    assert not any(b.trainable for b in t.blocks) and t.token_ids == rendered.token_ids


def test_to_dict_round_trip(tok, sim):
    sim.step([{"role": "user", "content": "Hi"}], "Hello.")
    sim.step([{"role": "user", "content": "Hi"}], ["A", "B"])
    d = json.loads(json.dumps(sim.tracker.to_dict()))
    back = ContextTracker.from_dict(d)
    assert back.n_calls == 2
    assert [t.to_dict() for t in back.timelines] == [t.to_dict() for t in sim.tracker.timelines]
    back.record_call(
        render_prompt(tok, [{"role": "user", "content": "x"}]), [Completion([5], [-1.0], "length", "")]
    )
    assert back.timelines[-1].call_index == 2
