"""Timeline merging on episodes played through render_prompt + ContextTracker with the real SmolLM2
template (and custom templates where a behaviour needs one)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from engine.config import SwarmConfig, TrainingConfig
from engine.errors import ConfigError
from engine.tracking.chat import parse_tool_calls, render_prompt
from engine.tracking.merging import blocks_match, episode_samples, merge_timelines, strip_reasoning
from engine.training.batch import build_samples
from engine.types import Author, Block, Timeline

MODES = ("token", "text", "text+strip", "off")
TOOLS = [
    {
        "type": "function",
        "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {}, "b": {}}}},
    }
]


def assistant(completion_text: str) -> dict:
    """What an OpenAI client sends back for a reply the server returned (tool calls parsed out)."""
    content, calls = parse_tool_calls(completion_text)
    return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}


def chat_3_calls(sim):
    m = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
    for reply, nxt in [("2+2 = 4.", "And times 3?"), ("It is 12.", "Thanks!"), ("You're welcome.", None)]:
        (c,) = sim.step(m, reply)
        if nxt:
            m += [assistant(c.text), {"role": "user", "content": nxt}]
    return sim.episode()


def tool_3_calls(sim):
    m = [{"role": "user", "content": "Add 1 and 2, then say thanks."}]
    (c,) = sim.step(
        m, 'Let me add.\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', TOOLS
    )
    m += [assistant(c.text), {"role": "tool", "tool_call_id": "call_x", "content": "3"}]
    (c,) = sim.step(m, '<tool_call>{"name": "add", "arguments": {"a": 3, "b": 0}}</tool_call>', TOOLS)
    m += [assistant(c.text), {"role": "tool", "tool_call_id": "call_y", "content": "3"}]
    sim.step(m, "The sum is 3. Thanks!", TOOLS)
    return sim.episode()


def non_canonical_ids(tok):
    """'Hello there!' sampled as 'Hel'+'lo'+' there'+'!' - the tokenizer itself says 'Hello'+' there'+'!'."""
    ids = tok.convert_tokens_to_ids(["Hel", "lo"]) + tok.encode(" there!", add_special_tokens=False)
    assert tok.decode(ids) == "Hello there!" and ids != tok.encode("Hello there!", add_special_tokens=False)
    return ids


def drift_2_calls(sim):
    m = [{"role": "user", "content": "Greet me."}]
    (c,) = sim.step(m, non_canonical_ids(sim.tok))
    sim.step(m + [assistant(c.text), {"role": "user", "content": "Again."}], "Hi.")
    return sim.episode()


# drops reasoning from every assistant turn in the history (the reply being generated keeps it)
THINK_DROP = (
    "{% for m in messages %}{% set c = m.content %}"
    "{% if m.role == 'assistant' and '</think>' in c %}{% set c = c.split('</think>')[-1].lstrip() %}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ c }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def think_2_calls(sim):
    m = [{"role": "user", "content": "2+2?"}]
    (c,) = sim.step(m, "<think>Two and two make four.</think>\n4")
    sim.step(m + [assistant(c.text), {"role": "user", "content": "Sure?"}], "<think>Yes.</think>\nYes.")
    return sim.episode()


# Our own template with Qwen3's history rules: reasoning is rendered only for assistant turns after the
# last user query (and an empty think block for such a turn when it is last, which makes prefixes
# unstable), tool results are user turns, tool calls are rendered natively.
QWEN3_LIKE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' }}{%- for t in tools %}{{- t | tojson }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{%- set c = m.content %}{%- set r = '' %}"
    "{%- if '</think>' in c %}{%- set r = c.split('</think>')[0].split('<think>')[-1].strip('\\n') %}{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if loop.index0 > ns.last and (loop.last or r) %}{{- '<think>\\n' + r + '\\n</think>\\n\\n' }}{%- endif %}"
    "{{- c }}"
    "{%- for t in m.tool_calls or [] %}{%- if c or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n' + ({'name': t.function.name, 'arguments': t.function.arguments} | tojson) + '\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
NATIVE_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


def qwen3_agent(sim, think: bool):
    """Two tool steps, an answer, a follow-up question and a last answer (4 calls)."""
    t = (lambda s: f"<think>\n{s}\n</think>\n\n") if think else (lambda s: "")
    m = [{"role": "user", "content": "Add 1 and 2."}]
    for reply, then in [
        (t("need add") + NATIVE_CALL, {"role": "tool", "tool_call_id": "a", "content": "3"}),
        (t("check again") + NATIVE_CALL, {"role": "tool", "tool_call_id": "b", "content": "3"}),
        (t("done") + "It is 3.", {"role": "user", "content": "Sure?"}),
        (t("yes") + "Yes.", None),
    ]:
        (c,) = sim.step(m, reply, TOOLS)
        if then is not None:
            m += [assistant(c.text), then]
    return sim.episode()


def siblings(sim, replies=("4", "Four.")):
    m = [{"role": "user", "content": "2+2?"}]
    first = sim.step(m, list(replies))
    sim.step(m + [assistant(first[0].text), {"role": "user", "content": "Sure?"}], "Yes.")
    return sim.episode()


def truncated_2_calls(sim):
    m = [{"role": "user", "content": "Count to ten."}]
    (c,) = sim.step(m, "One, two, three", eos=False)
    sim.step(m + [assistant(c.text), {"role": "user", "content": "Go on."}], "Four.")
    return sim.episode()


def edited_2_calls(sim):
    m = [{"role": "user", "content": "Hi"}]
    (c,) = sim.step(m, " Hello! ")
    sim.step(
        m + [{"role": "assistant", "content": c.text.strip()}, {"role": "user", "content": "Bye"}], "Bye."
    )
    return sim.episode()


def exact(builder):
    """The scenario `builder` played with exact histories (the server's default)."""

    def play(sim):
        sim.exact_history = True
        return builder(sim)

    return play


# scenario -> (builder, template or None, expected sample counts per mode)
SCENARIOS = {
    "chat_3_calls": (chat_3_calls, None, {"token": 1, "text": 1, "off": 3}),
    "tool_3_calls": (tool_3_calls, None, {"token": 1, "text": 1, "off": 3}),
    "drift_2_calls": (drift_2_calls, None, {"token": 2, "text": 1, "off": 2}),
    # the server's default: the re-sent reply is fed as its sampled ids, so token mode merges too
    "drift_2_calls_exact": (exact(drift_2_calls), None, {"token": 1, "text": 1, "off": 2}),
    "chat_3_calls_exact": (exact(chat_3_calls), None, {"token": 1, "text": 1, "off": 3}),
    "tool_3_calls_exact": (exact(tool_3_calls), None, {"token": 1, "text": 1, "off": 3}),
    # a reply the client edited has no sampled match: the template's ids
    "edited_2_calls_exact": (exact(edited_2_calls), None, {"token": 2, "text": 2, "off": 2}),
    # a reply cut by max_tokens: fed as sampled, the template's end of turn after it, so both modes merge
    "truncated_2_calls_exact": (exact(truncated_2_calls), None, {"token": 1, "text": 1, "off": 2}),
    "think_2_calls": (think_2_calls, THINK_DROP, {"token": 2, "text": 2, "text+strip": 1, "off": 2}),
    "qwen3_like_tools": (lambda s: qwen3_agent(s, False), QWEN3_LIKE, {"token": 1, "text": 1, "off": 4}),
    # reasoning of turns before the follow-up question is dropped from the last call's history
    "qwen3_like_think_tools": (
        lambda s: qwen3_agent(s, True),
        QWEN3_LIKE,
        {"token": 2, "text": 2, "text+strip": 1, "off": 4},
    ),
    "siblings": (siblings, None, {"token": 2, "text": 2, "off": 3}),
    "identical_siblings": (lambda s: siblings(s, ("4", "4")), None, {"token": 2, "text": 2, "off": 3}),
    "truncated_2_calls": (truncated_2_calls, None, {"token": 2, "text": 2, "off": 2}),
    "edited_2_calls": (edited_2_calls, None, {"token": 2, "text": 2, "off": 2}),
}


@pytest.fixture
def play(tok, make_sim, with_template):
    def run(name):
        builder, template, expected = SCENARIOS[name]
        return builder(make_sim(tok if template is None else with_template(tok, template))), expected

    return run


def sampled_blocks(timelines):
    return [(k, b) for t in timelines for k, b in enumerate(t.blocks) if b.trainable]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sample_counts_weights_and_no_sampled_token_lost(play, name, mode):
    episode, expected = play(name)
    before = episode.to_dict()
    strip = mode == "text+strip"
    samples = episode_samples(
        episode, "text" if strip else mode, normalize=strip_reasoning if strip else None
    )
    assert episode.to_dict() == before  # inputs untouched
    assert len(samples) == expected.get(mode, expected["text"])
    assert sum(s.weight for s in samples) == pytest.approx(1.0)
    assert all(s.weight == pytest.approx(1 / len(samples)) and s.reward == episode.reward for s in samples)
    survivors = [s.timeline for s in samples]
    # every sampled block of every original timeline is trainable, with its ids and logprobs, at the same
    # index of some survivor; and no trainable token is duplicated
    for k, b in sampled_blocks(episode.timelines):
        assert any(
            len(t.blocks) > k
            and t.blocks[k].trainable
            and t.blocks[k].token_ids == b.token_ids
            and t.blocks[k].logprobs == b.logprobs
            for t in survivors
        ), (k, b.text)
    assert sum(map(sum, (t.loss_mask for t in survivors))) == sum(
        map(sum, (t.loss_mask for t in episode.timelines))
    )
    for t in survivors:  # loss mask / logprobs alignment (the fake logprobs are never 0.0)
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        assert [int(lp != 0.0) for lp in t.logprobs] == t.loss_mask
        assert all(b.author is Author.LLM and b.logprobs is not None for b in t.blocks if b.trainable)


def test_canonical_multi_turn_episode_is_one_sample_with_its_exact_ids(play):
    episode, _ = play("chat_3_calls")
    (s,) = episode_samples(episode, "token")
    last = episode.timelines[-1]
    assert s.timeline.token_ids == last.token_ids  # token mode never changes ids, only marks them trained
    assert s.timeline.call_index == 2
    trained = [b for b in s.timeline.blocks if b.trainable]
    assert [b.token_ids for b in trained] == [t.blocks[-1].token_ids for t in episode.timelines]
    assert [b.text for b in trained] == [
        "2+2 = 4.<|im_end|>",
        "It is 12.<|im_end|>",
        "You're welcome.<|im_end|>",
    ]


def test_token_and_text_matching_disagree_on_tokenizer_drift(play, tok):
    episode, _ = play("drift_2_calls")
    first, second = episode.timelines
    k = len(first.blocks) - 1
    assert second.blocks[k].text == first.blocks[k].text  # same text ...
    assert second.blocks[k].token_ids != first.blocks[k].token_ids  # ... re-tokenised canonically
    assert len(merge_timelines(episode.timelines, "token")) == 2
    (merged,) = merge_timelines(episode.timelines, "text")
    # the survivor trains on the ids that were sampled, replacing the re-tokenised ones; its text is unchanged
    assert merged.blocks[k].token_ids == non_canonical_ids(tok) + [tok.eos_token_id]
    assert merged.blocks[k].trainable and merged.blocks[k].logprobs == first.blocks[k].logprobs
    assert merged.token_ids != second.token_ids and len(merged.token_ids) == len(second.token_ids) + 1
    assert "".join(b.text for b in merged.blocks) == "".join(b.text for b in second.blocks)


def test_exact_history_feeds_the_sampled_ids_and_counts_what_it_did(tok, make_sim):
    sim = make_sim(tok, exact_history=True)
    episode = drift_2_calls(sim)
    first, second = episode.timelines
    k = len(first.blocks) - 1
    sampled = non_canonical_ids(tok) + [tok.eos_token_id]
    # the model was fed the ids it sampled, not the template's canonical re-tokenisation
    assert second.blocks[k].token_ids == sampled and not second.blocks[k].trainable
    assert second.token_ids[: len(sim.fed)] == sim.fed  # the timeline is the prompt as fed, then the reply
    assert "".join(b.text for b in second.blocks[:-1]) == render_prompt(tok, [
        {"role": "user", "content": "Greet me."}, assistant("Hello there!"), {"role": "user", "content": "Again."},
    ]).text  # texts untouched
    assert sim.history.as_dict() == {"replaced": 1, "identical": 0, "fallback": 0, "closed": 0}
    (merged,) = merge_timelines(episode.timelines, "token")
    assert merged.token_ids == second.token_ids  # token mode: the survivor is exactly what call 2 saw
    assert merged.blocks[k].trainable and merged.blocks[k].logprobs == first.blocks[k].logprobs
    canonical = make_sim(tok, exact_history=True)
    chat_3_calls(canonical)
    assert canonical.history.as_dict() == {"replaced": 0, "identical": 3, "fallback": 0, "closed": 0}  # 1 + 2 re-sent turns
    edited = make_sim(tok, exact_history=True)
    edited_2_calls(edited)
    assert edited.history.as_dict() == {"replaced": 0, "identical": 0, "fallback": 1, "closed": 0}


def test_a_reply_cut_by_max_tokens_is_fed_as_sampled_then_closed_by_the_template(tok, make_sim):
    sim = make_sim(tok, exact_history=True)
    episode = truncated_2_calls(sim)
    first, second = episode.timelines
    k = len(first.blocks) - 1
    cut = first.blocks[k]
    assert cut.trainable and cut.token_ids[-1] != tok.eos_token_id  # sampled without an end of turn
    # call 2 saw the sampled ids, then the template's closing of the turn in its own glue block
    assert second.blocks[k].token_ids == cut.token_ids and second.blocks[k].text == cut.text
    assert second.blocks[k + 1].token_ids == [tok.eos_token_id] and second.blocks[k + 1].author is Author.ENV
    assert second.token_ids[: len(first.token_ids)] == first.token_ids
    assert sim.history.as_dict() == {"replaced": 0, "identical": 0, "fallback": 0, "closed": 1}
    (merged,) = merge_timelines(episode.timelines, "token")
    assert merged.token_ids == second.token_ids  # exactly what call 2 was fed, plus its reply
    assert merged.blocks[k].trainable and merged.blocks[k].logprobs == cut.logprobs


def test_dropped_reasoning_merges_only_with_a_normaliser(play):
    episode, _ = play("think_2_calls")
    first, second = episode.timelines
    k = len(first.blocks) - 1
    assert "Two and two" not in second.blocks[k].text and "Two and two" in first.blocks[k].text
    assert len(merge_timelines(episode.timelines, "token", normalize=strip_reasoning)) == 2  # ids differ
    assert len(merge_timelines(episode.timelines, "text")) == 2
    (merged,) = merge_timelines(episode.timelines, "text", normalize=strip_reasoning)
    assert merged.blocks[k].token_ids == first.blocks[k].token_ids  # reasoning re-inserted, as sampled
    assert "Two and two" in "".join(b.text for b in merged.blocks)
    samples = episode_samples(episode, "text", normalize=strip_reasoning)
    assert len(samples) == 1 and samples[0].weight == 1.0


def test_strip_reasoning_is_set_in_the_training_config(play):
    """`training.strip_reasoning` reaches the samples the trainer builds, and only with text merging: with
    token merging it would be silently ignored, so the config rejects it (pydantic wraps the validator's
    ConfigError in a ValidationError, like every cross-field check of SwarmConfig)."""
    episode, _ = play("think_2_calls")
    advantages = torch.zeros(1)
    assert len(build_samples([episode], TrainingConfig(merge="text"), advantages)) == 2
    (sample,) = build_samples([episode], TrainingConfig(merge="text", strip_reasoning=True), advantages)
    assert sample.weight == 1.0 and "Two and two" in "".join(b.text for b in sample.timeline.blocks)
    with pytest.raises(ValidationError, match="set merge: text"):
        SwarmConfig(training={"strip_reasoning": True})
    assert SwarmConfig(training={"merge": "text", "strip_reasoning": True}).training.strip_reasoning


def test_sibling_choices_stay_separate(play):
    episode, _ = play("siblings")
    a, b, cont = episode.timelines
    merged = merge_timelines(episode.timelines, "token")
    assert [t.call_index for t in merged] == [
        0,
        1,
    ]  # choice "Four." survives; "4" is absorbed by the follow-up
    assert merged[0].blocks[-1].token_ids == b.blocks[-1].token_ids
    assert merged[1].blocks[len(a.blocks) - 1].token_ids == a.blocks[-1].token_ids


def test_blocks_sampled_in_both_timelines_never_match():
    x = Block(Author.LLM, "4", [34], [-0.1], True)
    assert not blocks_match(x, Block(Author.LLM, "4", [34], [-0.2], True), "token")
    assert blocks_match(Block(Author.LLM, "4", [34]), x, "token")
    assert blocks_match(Block(Author.USER, "4", [34]), x, "token")  # authors are not compared
    assert blocks_match(Block(Author.LLM, "4", [35, 36]), x, "text")
    assert not blocks_match(Block(Author.LLM, "4", [34]), x, "off")


def test_shorter_later_timeline_is_not_absorbed_and_order_is_kept():
    p = Block(Author.ENV, "p", [1, 2])
    early = Timeline(
        [p, Block(Author.USER, "q", [3]), Block(Author.LLM, "r", [4], [-1.0], True)], call_index=0
    )
    late = Timeline([p, Block(Author.LLM, "s", [5], [-1.0], True)], call_index=1)
    assert [t.call_index for t in merge_timelines([late, early], "token")] == [1, 0]


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="token, text, off"):
        merge_timelines([], "fuzzy")  # type: ignore[arg-type]


def test_strip_reasoning():
    assert strip_reasoning("<think>a\nb</think>\n\nAnswer<think>x</think>.") == "Answer."
    assert strip_reasoning("no thoughts") == "no thoughts"
