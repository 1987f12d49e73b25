"""Tool calls end to end, with a scripted model that writes them (tests_support.ScriptedInference): the
reply path turns `<tool_call>` text into OpenAI tool_calls, and streaming with tools sends content as it
is generated, holding back only text that may begin a tool call."""

from __future__ import annotations

import json
import time

from tests_support import scripted_backend_factory

from engine.server.core import streamable
from engine.tasks.calculator import TOOLS

MSGS = [{"role": "user", "content": "What is 12 * 3?"}]
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*3"}}</tool_call>'
PREAMBLE = "Let me work that out with the calculator."


def test_streamable_holds_back_only_what_may_begin_a_tool_call():
    assert streamable("Let me <tool", (), tools=True) == "Let me"
    assert streamable("Let me <to", (), tools=False) == "Let me <to"
    assert streamable("Let me\n" + CALL + " more", (), tools=True) == "Let me"
    assert streamable("a < b and <tool_cal", (), tools=True) == "a < b and"
    assert streamable("x <b>", (), tools=True) == "x <b>"  # cannot begin "<tool_call>": sent
    assert streamable("done. END tail", ("END",), tools=True) == "done."


def test_a_tool_call_reply_becomes_openai_tool_calls_and_is_recorded(live_server):
    srv = live_server(backend_factory=scripted_backend_factory([PREAMBLE + "\n" + CALL, "It is 36."]))
    with srv.client() as c:
        ep = c.begin_episode("tools")
        llm = ep.openai(max_retries=0)
        out = llm.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=64)
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content == PREAMBLE
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "calculator" and json.loads(call.function.arguments) == {"expression": "12*3"}
        history = [*MSGS, choice.message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": "36"}]
        final = llm.chat.completions.create(model="tiny", messages=history, tools=TOOLS, max_tokens=64)
        assert final.choices[0].message.content == "It is 36." and not final.choices[0].message.tool_calls
        assert ep.end(1.0).accepted
        (episode,) = srv.server.pool.groups["tools"]
        first, second = episode.timelines
        sampled = [b for b in first.blocks if b.trainable]
        assert len(sampled) == 1 and CALL in sampled[0].text  # the raw reply, tool call included, is trained on
        # the second prompt re-rendered the tool call from the OpenAI message the client sent back
        assert "calculator" in "".join(b.text for b in second.blocks[: len(first.blocks)])


def test_streaming_with_tools_sends_content_as_generated_and_the_call_at_the_end(live_server):
    srv = live_server(backend_factory=scripted_backend_factory([PREAMBLE + "\n" + CALL], token_delay_s=0.05))
    with srv.client() as c:
        ep = c.begin_episode("tools")
        stream = ep.openai(max_retries=0).chat.completions.create(
            model="tiny", messages=MSGS, tools=TOOLS, max_tokens=64, stream=True
        )
        chunks = [(time.monotonic(), ch) for ch in stream]
        content = [(t, ch.choices[0].delta.content) for t, ch in chunks if ch.choices and ch.choices[0].delta.content]
        calls = [ch.choices[0].delta.tool_calls for _, ch in chunks if ch.choices and ch.choices[0].delta.tool_calls]
        finish = [ch.choices[0].finish_reason for _, ch in chunks if ch.choices and ch.choices[0].finish_reason]
        assert "".join(text for _, text in content) == PREAMBLE  # what a non-streamed reply's content is
        assert len(content) >= 3  # piecewise, as generated
        # The preamble left while the call was still being generated (about 20 tokens x 50 ms), not with it.
        assert chunks[-1][0] - content[0][0] > 0.5
        assert not any("<" in text for _, text in content)
        (tool_calls,) = calls
        assert tool_calls[0].function.name == "calculator" and tool_calls[0].index == 0
        assert json.loads(tool_calls[0].function.arguments) == {"expression": "12*3"}
        assert finish == ["tool_calls"]
        ep.end(0.0)


def test_streaming_with_tools_but_no_call_streams_everything(live_server):
    reply = "No tool needed: 12 * 3 is 36, and a < b."
    srv = live_server(backend_factory=scripted_backend_factory([reply], token_delay_s=0.01))
    with srv.client() as c:
        ep = c.begin_episode("tools")
        stream = ep.openai(max_retries=0).chat.completions.create(
            model="tiny", messages=MSGS, tools=TOOLS, max_tokens=64, stream=True
        )
        chunks = [ch for ch in stream if ch.choices]
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == reply
        assert sum(1 for ch in chunks if ch.choices[0].delta.content) >= 5
        assert chunks[-1].choices[0].finish_reason == "stop"
        ep.end(0.0)
