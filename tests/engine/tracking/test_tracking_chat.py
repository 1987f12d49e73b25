"""render_prompt with the real SmolLM2 chat template (ChatML, no tool support) and custom templates."""

from __future__ import annotations

import json
import re

import pytest

from engine.errors import BadRequest
from engine.tracking import chat
from engine.tracking.chat import format_tool_calls, parse_tool_calls, render_prompt, template_supports_tools
from engine.tracking.messages import validate_messages
from engine.types import Author

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}

CONVERSATIONS = {
    "1-turn": [{"role": "user", "content": "What is 2+2?"}],
    "1-turn+system": [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "2-turn": [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "3-turn+system": [
        {"role": "system", "content": "You are a calculator."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "times 3?"},
        {"role": "assistant", "content": " 12, since 4 * 3 = 12.\n"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "and minus 1?"}, {"type": "text", "text": "Explain."}],
        },
    ],
    "tools": [
        {"role": "user", "content": "Add 1 and 2."},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
        {"role": "assistant", "content": "It is 3."},
        {"role": "user", "content": "Now 3 and 4, explain first."},
        {
            "role": "assistant",
            "content": "Adding.",
            "tool_calls": [{**CALL, "function": {"name": "add", "arguments": {"a": 3, "b": 4}}}],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": '{"result": 7}'},
    ],
    "whitespace": [  # contents that start/end with spaces and newlines: tokens may straddle block edges
        {"role": "user", "content": "  spaced  "},
        {"role": "assistant", "content": "\n\nHi\n"},
        {"role": "user", "content": "\n"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "<|im_end|> injected"},
    ],
    "tools+system": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Add 1 and 2."},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    ],
}


def gen_prompt(tokenizer, messages):
    """The generation prompt text, derived from the template (not hard-coded)."""
    with_gen = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    without = tokenizer.apply_chat_template(messages, tokenize=False)
    assert with_gen.startswith(without)
    return with_gen[len(without) :]


def check_partition(tokenizer, r):
    """Blocks partition exactly the ids of tokenizing the full text once (and the text itself)."""
    assert [t for b in r.blocks for t in b.token_ids] == r.token_ids
    assert "".join(b.text for b in r.blocks) == r.text
    assert tokenizer(r.text, add_special_tokens=False)["input_ids"] == r.token_ids
    assert all(b.token_ids for b in r.blocks)
    assert all(not b.trainable and b.logprobs is None for b in r.blocks)


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_blocks_cover_exactly_the_full_tokenisation(tok, name):
    messages = CONVERSATIONS[name]
    tools = TOOLS if name.startswith("tools") else None
    r = render_prompt(tok, messages, tools)
    check_partition(tok, r)
    if tools is None:  # no tool rewriting: identical to what the template itself tokenizes
        plain = [{"role": m["role"], "content": m["content"]} for m in validate_messages(messages)]
        ids = tok.apply_chat_template(plain, tokenize=True, add_generation_prompt=True, return_dict=True)[
            "input_ids"
        ]
        assert r.token_ids == list(ids)
    # the generation prompt is its own ENV block at the end
    assert r.blocks[-1].author is Author.ENV
    assert r.blocks[-1].text == gen_prompt(tok, [{"role": "user", "content": "x"}])


def test_one_block_per_message_with_the_right_author(tok):
    messages = CONVERSATIONS["3-turn+system"]
    r = render_prompt(tok, messages)
    users = [b.text for b in r.blocks if b.author is Author.USER]
    assert users == ["2+2?", "times 3?", "and minus 1?\nExplain."]
    llm = [b for b in r.blocks if b.author is Author.LLM]
    eot = tok.decode([tok.eos_token_id])
    # assistant bodies: content + the end-of-turn token, exactly as a sampled reply would end
    assert [b.text for b in llm] == ["4" + eot, " 12, since 4 * 3 = 12.\n" + eot]
    assert all(b.token_ids[-1] == tok.eos_token_id for b in llm)
    assert any(b.author is Author.ENV and b.text == "You are a calculator." for b in r.blocks)


def test_assistant_body_follows_the_generation_prompt(tok):
    """The re-rendered assistant block starts where the generation prompt ended: its header is exactly the
    generation-prompt block of the call that sampled it."""
    history = [{"role": "user", "content": "Hi"}]
    first = render_prompt(tok, history)
    second = render_prompt(
        tok, [*history, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    )
    k = len(first.blocks)
    assert [b.text for b in second.blocks[:k]] == [b.text for b in first.blocks]
    assert [b.token_ids for b in second.blocks[:k]] == [b.token_ids for b in first.blocks]
    assert second.blocks[k].author is Author.LLM
    assert second.blocks[k].token_ids == tok.encode("Hello.", add_special_tokens=False) + [tok.eos_token_id]


def test_tools_are_described_in_the_system_message_without_native_support(tok):
    assert not template_supports_tools(tok)
    r = render_prompt(tok, CONVERSATIONS["tools"], TOOLS)
    system = r.blocks[1]
    assert system.author is Author.ENV
    assert '"name": "add"' in system.text and "<tool_call>" in system.text
    assert "SmolLM" not in r.text  # our system message replaces the template's default one
    r2 = render_prompt(tok, CONVERSATIONS["tools+system"], TOOLS)
    assert "Use tools.\n\n# Tools" in r2.text
    # assistant tool calls are rendered as the canonical text the model was told to produce
    llm = [b.text for b in r.blocks if b.author is Author.LLM]
    eot = tok.decode([tok.eos_token_id])
    assert llm[0] == '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' + eot
    assert llm[2] == 'Adding.\n<tool_call>{"name": "add", "arguments": {"a": 3, "b": 4}}</tool_call>' + eot
    # SmolLM2's template renders role "tool" as is; the result is an ENV block
    assert "<|im_start|>tool\n3<|im_end|>" in r.text
    assert any(b.author is Author.ENV and b.text == '{"result": 7}' for b in r.blocks)


STRICT_ROLES = (
    "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + m['role']) }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_tool_results_become_marked_user_messages_when_the_template_rejects_the_role(tok, with_template):
    t = with_template(tok, STRICT_ROLES)
    r = render_prompt(t, CONVERSATIONS["tools"], TOOLS)
    check_partition(tok, r)
    assert "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>" in r.text
    assert "user message wrapped in <tool_response>" in r.text
    wrapped = [b for b in r.blocks if "<tool_response>" in b.text and "tools>" not in b.text]
    assert wrapped and all(b.author is Author.ENV for b in wrapped)


NATIVE = (
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_native_tool_templates_get_tools_and_tool_calls_passed_through(tok, with_template):
    t = with_template(tok, NATIVE)
    assert template_supports_tools(t)
    r = render_prompt(t, CONVERSATIONS["tools"], TOOLS)
    check_partition(tok, r)
    assert r.native_tools and "<tools>" in r.text and "# Tools" not in r.text
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>' in r.text
    llm = [b.text for b in r.blocks if b.author is Author.LLM]
    assert llm[0] == '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>'
    # the native format parses back with the same parser
    content, calls = parse_tool_calls(llm[0].removesuffix("<|im_end|>"))
    assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"a": 1, "b": 2}


# Qwen3-style: drops <think> of assistant turns before the last user message, so a prefix that ends with
# the assistant turn renders differently from the full conversation.
LAST_QUERY_THINK = (
    "{% set ns = namespace(last=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}{% set c = m.content %}"
    "{% if m.role == 'assistant' and loop.index0 < ns.last and '</think>' in c %}{% set c = c.split('</think>')[-1].lstrip() %}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ c }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_unstable_prefixes_still_label_messages(tok, with_template):
    """The prefix ending with the assistant turn renders differently from the full conversation (the turn
    is last there), so its end is unknown; its body is still found (generation prompt .. end-of-turn) and
    its trailer and the next header become one ENV block."""
    t = with_template(tok, LAST_QUERY_THINK)
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>hmm</think>A1"},
        {"role": "user", "content": "Q2"},
    ]
    assert not t.apply_chat_template(messages, tokenize=False).startswith(
        t.apply_chat_template(messages[:2], tokenize=False)
    )
    r = render_prompt(t, messages)
    check_partition(tok, r)
    assert "hmm" not in r.text
    assert [(b.author, b.text) for b in r.blocks] == [
        (Author.ENV, "<|im_start|>user\n"),
        (Author.USER, "Q1"),
        (Author.ENV, "<|im_end|>\n"),
        (Author.ENV, "<|im_start|>assistant\n"),
        (Author.LLM, "A1<|im_end|>"),  # as rendered: reasoning dropped by the template
        (Author.ENV, "\n<|im_start|>user\n"),
        (Author.USER, "Q2"),
        (Author.ENV, "<|im_end|>\n"),
        (Author.ENV, "<|im_start|>assistant\n"),
    ]


HOSTILE = (
    "{{ messages | map(attribute='content') | join | length }}|{% for m in messages %}"
    "<|im_start|>{{ 'bot' if m.role == 'assistant' else m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_hostile_template_falls_back_to_env_blocks(tok, with_template):
    """Output depends on every message's content (defeats prefixes and sentinels) and history turns use
    another header than the generation prompt: nothing can be located, so the conversation is one ENV
    block before the generation prompt, and the partition still holds."""
    t = with_template(tok, HOSTILE)
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]
    r = render_prompt(t, messages)
    check_partition(tok, r)
    assert [(b.author, b.text[:3]) for b in r.blocks] == [(Author.ENV, "6|<"), (Author.ENV, "<|i")]
    assert r.blocks[0].text.endswith("Q2<|im_end|>\n")


def test_tool_call_text_round_trip():
    calls = [
        CALL,
        {"id": "c2", "type": "function", "function": {"name": "mul", "arguments": '{"x": [1, 2], "y": "é"}'}},
    ]
    text = format_tool_calls("Let me compute.", calls)
    assert (
        text
        == 'Let me compute.\n<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n<tool_call>{"name": "mul", "arguments": {"x": [1, 2], "y": "é"}}</tool_call>'
    )
    content, parsed = parse_tool_calls(text)
    assert content == "Let me compute."
    assert [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed] == [
        ("function", "add", {"a": 1, "b": 2}),
        ("function", "mul", {"x": [1, 2], "y": "é"}),
    ]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", c["id"]) for c in parsed)
    assert parsed[0]["id"] != parsed[1]["id"]
    assert format_tool_calls(content, parsed) == text  # canonical text round-trips byte for byte
    assert parse_tool_calls(format_tool_calls("", calls[:1]))[0] is None


def test_parse_tool_calls_keeps_malformed_blocks_in_content():
    assert parse_tool_calls("  no calls here \n") == ("  no calls here \n", [])
    bad = 'ok <tool_call>{"name": "add", "arguments": {"a": 1}</tool_call>'
    assert parse_tool_calls(bad) == (bad, [])
    assert parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>')[1] == []  # no name
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": [1]}</tool_call>')[1] == []
    assert parse_tool_calls('cut <tool_call>{"name": "f", "argu')[1] == []  # unterminated
    mixed = 'A <tool_call>{bad}</tool_call> B\n<tool_call>\n{"name": "f", "arguments": "{\\"k\\": 1}"}\n</tool_call>'
    content, calls = parse_tool_calls(mixed)
    assert content == "A <tool_call>{bad}</tool_call> B"
    assert calls[0]["function"] == {"name": "f", "arguments": '{"k": 1}'}
    assert (
        parse_tool_calls('<tool_call>{"name": "noargs"}</tool_call>')[1][0]["function"]["arguments"] == "{}"
    )


@pytest.mark.parametrize(
    "messages, tools, reason",
    [
        ([], None, "non-empty list"),
        ("hi", None, "non-empty list"),
        ([{"role": "robot", "content": "x"}], None, "messages[0].role"),
        (["hi"], None, "messages[0] must be an object"),
        ([{"role": "user"}], None, "messages[0].content is required"),
        ([{"role": "user", "content": 3}], None, "messages[0].content must be"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            None,
            "only 'text'",
        ),
        ([{"role": "user", "content": [{"type": "text"}]}], None, "content[0].text"),
        ([{"role": "user", "content": "x", "tool_calls": [CALL]}], None, "only assistant"),
        ([{"role": "assistant", "content": None, "tool_calls": {"a": 1}}], None, "tool_calls must be a list"),
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}],
            None,
            "function must be an object",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"function": {"name": "", "arguments": "{}"}}],
                }
            ],
            None,
            "name must be",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
                }
            ],
            None,
            "not valid JSON",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}],
                }
            ],
            None,
            "JSON object",
        ),
        ([{"role": "tool", "content": "3", "tool_call_id": 7}], None, "tool_call_id must be a string"),
        ([{"role": "user", "content": "x"}], {"a": 1}, "tools must be a list"),
        ([{"role": "user", "content": "x"}], [{"type": "function"}], "tools[0].function"),
        ([{"role": "user", "content": "x"}], [TOOLS[0], TOOLS[0]], "defined twice"),
    ],
)
def test_invalid_requests_raise_bad_request_with_a_reason(tok, messages, tools, reason):
    with pytest.raises(BadRequest, match=re.escape(reason)):
        render_prompt(tok, messages, tools)


def test_template_rejection_is_a_bad_request(tok, with_template):
    t = with_template(tok, STRICT_ROLES.replace("'system', ", ""))
    with pytest.raises(BadRequest, match="chat template rejected"):
        render_prompt(t, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])


def test_developer_role_and_text_parts(tok):
    a = render_prompt(
        tok,
        [
            {"role": "developer", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ],
    )
    b = render_prompt(tok, [{"role": "system", "content": "S"}, {"role": "user", "content": "a\nb"}])
    assert a.token_ids == b.token_ids and [x.text for x in a.blocks] == [x.text for x in b.blocks]


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_one_shot_probe_and_per_message_probes_agree(tok, name, monkeypatch):
    """The fast path (one render with every content replaced) and the general path (a probe per message,
    prefix renders) must cut identically wherever both apply."""
    tools = TOOLS if name.startswith("tools") else None
    fast = render_prompt(tok, CONVERSATIONS[name], tools)
    monkeypatch.setattr(chat._Splitter, "_content_spans_at_once", lambda self: None)
    slow = render_prompt(tok, CONVERSATIONS[name], tools)
    assert [(b.author, b.text, b.token_ids) for b in fast.blocks] == [
        (b.author, b.text, b.token_ids) for b in slow.blocks
    ]


def test_empty_assistant_reply_is_just_the_end_of_turn_token(tok):
    r = render_prompt(
        tok,
        [
            {"role": "user", "content": "Say nothing."},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "ok"},
        ],
    )
    (llm,) = [b for b in r.blocks if b.author is Author.LLM]
    assert llm.token_ids == [tok.eos_token_id]


def test_end_of_turn_ids_choose_where_assistant_bodies_end(tok):
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"},
    ]
    newline = tok.encode("\n", add_special_tokens=False)
    assert len(newline) == 1
    r = render_prompt(tok, messages, end_of_turn_ids=[tok.eos_token_id, newline[0]])
    (llm,) = [b for b in r.blocks if b.author is Author.LLM]
    assert llm.text == "Hello.<|im_end|>"  # the first end-of-turn token after the body start closes it
    assert (
        set(r.end_of_turn) == {tok.eos_token_id, newline[0]}
        and r.end_of_turn[tok.eos_token_id] == "<|im_end|>"
    )
