"""One oversized request must not stall or bloat the server (issue 26, defect 3): a body over the cap is a
413 with the reason before it is read, an over-long conversation is refused from its length before any
tokenizer runs, and rendering a long prompt runs off the event loop, so /health keeps answering."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from engine.config import EpisodeConfig, SwarmConfig
from engine.server import core

MSGS = [{"role": "user", "content": "What is 2 + 3?"}]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _raw_post_head(port: int, key: str, declared: int, sent: bytes) -> bytes:
    """Send a POST that declares `declared` body bytes but sends only `sent`; return the reply bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
        )
        s.sendall(head.encode() + sent)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            got = s.recv(65536)  # a server waiting for the rest of the body times out here (30 s)
            if not got:
                break
            reply += got
        return reply


def test_a_body_over_the_cap_is_a_413_with_the_reason_and_loses_nothing(live_server):
    srv = live_server(SwarmConfig(episodes=EpisodeConfig(max_request_bytes=64 * 1024)))
    with srv.client() as c:
        ep = c.begin_episode("t")
        # Declared 50 MB, 1 KB sent: answered at once from the header, the body is never waited for.
        reply = _raw_post_head(srv.port, ep.api_key, 50_000_000, b"{" + b" " * 1023)
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
        assert b"max_request_bytes" in reply and b"50000000 bytes" in reply
        # No declared length (chunked): refused once the bytes read pass the cap.
        big = ('{"model": "tiny", "messages": [{"role": "user", "content": "' + "x" * 200_000 + '"}]}').encode()
        r = httpx.post(
            ep.base_url + "/chat/completions",
            content=iter([big[i : i + 8192] for i in range(0, len(big), 8192)]),
            headers={**_auth(ep.api_key), "Content-Type": "application/json"},
            timeout=60,
        )
        assert r.status_code == 413 and "max_request_bytes" in r.json()["error"]["message"]
        # The episode is untouched: a normal call still works and is recorded.
        ok = ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        assert ok.choices and len(srv.server.episodes.get(ep.api_key).tracker.timelines) == 1
        assert httpx.get(srv.url + "/health", timeout=10).json()["ok"] is True


def test_an_over_long_conversation_is_refused_from_its_length_before_tokenising(live_server, monkeypatch):
    """Under the byte cap but far over the context: refused by the character count alone."""
    srv = live_server()  # default caps: 8 MiB body, 4096-token context
    rendered: list[int] = []
    real_render = core.render_prompt

    def counting_render(*args, **kwargs):
        rendered.append(1)
        return real_render(*args, **kwargs)

    monkeypatch.setattr(core, "render_prompt", counting_render)
    with srv.client() as c:
        ep = c.begin_episode("t")
        long = [{"role": "user", "content": "hello world " * 250_000}]  # 3 MB
        r = httpx.post(ep.base_url + "/chat/completions", json={"model": "tiny", "messages": long}, headers=_auth(ep.api_key), timeout=120)
        assert r.status_code == 400, r.text
        assert "at least" in r.json()["error"]["message"] and "max_context_tokens=4096" in r.json()["error"]["message"]
        assert rendered == []  # neither the template nor the tokenizer ran over it
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        assert rendered == [1]


def test_health_answers_while_a_long_prompt_is_rendered(live_server):
    """A context cap raised so a 2 MB prompt is rendered in full (the model's own 4096 positions then
    refuse it): the seconds of template and tokenizer work leave the event loop free."""
    cfg = SwarmConfig(episodes=EpisodeConfig(max_context_tokens=10_000_000))
    srv = live_server(cfg)
    with srv.client() as c:
        ep = c.begin_episode("t")
        long = [{"role": "user", "content": "hello world " * 170_000}]
        answer: dict[str, object] = {}

        def call() -> None:
            t0 = time.monotonic()
            answer["r"] = httpx.post(
                ep.base_url + "/chat/completions", json={"model": "tiny", "messages": long, "max_tokens": 4}, headers=_auth(ep.api_key), timeout=300
            )
            answer["s"] = time.monotonic() - t0

        worker = threading.Thread(target=call)
        worker.start()
        worst, polls = 0.0, 0
        while worker.is_alive():
            h0 = time.monotonic()
            assert httpx.get(srv.url + "/health", timeout=120).status_code == 200
            worst, polls = max(worst, time.monotonic() - h0), polls + 1
            time.sleep(0.05)
        worker.join()
    r, took = answer["r"], answer["s"]
    assert r.status_code == 400 and "context of 4096" in r.json()["error"]["message"], r.text
    assert worst < 0.5 * took, f"/health waited {worst:.2f} s of the call's {took:.2f} s: rendering ran on the event loop"
    assert polls >= 3, f"the call took {took:.2f} s: too quick to show anything"


@pytest.mark.parametrize("messages, token_chars, bound", [
    ([{"role": "user", "content": "abcdefghij"}], 3, 4),  # ceil(10 / 3)
    ([{"role": "system", "content": "ab"}, {"role": "assistant", "content": "x" * 99}, {"role": "tool", "content": "cd"}], 1, 4),
    ([{"role": "user", "content": [{"type": "text", "text": "abcd"}, {"type": "image_url"}]}], 2, 2),
    ("not a list", 1, 0),
])
def test_the_prompt_length_bound_counts_what_every_template_keeps(messages, token_chars, bound):
    from engine.server.limits import prompt_tokens_lower_bound

    assert prompt_tokens_lower_bound(messages, token_chars) == bound
