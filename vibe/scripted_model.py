"""A scripted model for the whole-loop probes: a real HTTP server on loopback speaking the OpenAI chat API.

The probes run the client's own `run()` against this server instead of a trained model, so the reward a
client computes can be compared across replies it did not choose: the task's gold answer, garbage, an
echo of the prompt, a piece of the prompt. Each play gets its own API key and the key alone selects its
reply (as a swarm server's key selects an episode):

- `Reply.text(s)`: always `s` (gold, garbage);
- `Reply.echo()`: the text of the last user message the client sent;
- `Reply.span(i)`: the i-th piece (`prompt_spans`) of that message, or "" when it has fewer;
- `Reply.matching({word: text}, default)`: the text of the first word found (case-insensitive) in that
  message, else `default`; a scripted judge whose grade depends on what it is shown (a gullible judge
  that pays for flattery, for vibe.judge_probes);
- `Reply.script(fn)`: `fn(text of that message)`; a scripted judge that grades by a fixed rule (the
  `summary` template's tests).

It answers `POST /v1/chat/completions` (plain JSON, or one SSE chunk when `stream` is set) and
`GET /v1/models`; an unknown key gets 401. Every call is counted per key, so a probe can tell a client
that never asked the model. Tool definitions are accepted and never called: the reply is always text.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vibe.reward_probes import prompt_spans

__all__ = ["Reply", "ReplyKind", "ScriptedModelServer"]

MODEL = "scripted"
MAX_BODY = 8 << 20


class ReplyKind(str, Enum):
    TEXT = "text"
    ECHO = "echo"
    SPAN = "span"
    MATCH = "match"
    SCRIPT = "script"


@dataclass(frozen=True)
class Reply:
    kind: ReplyKind
    text: str = ""
    index: int = 0
    cases: tuple[tuple[str, str], ...] = ()  # MATCH: (word, reply) in order
    fn: Callable[[str], str] | None = None  # SCRIPT: the last user message's text -> the reply

    @classmethod
    def fixed(cls, text: str) -> Reply:
        return cls(ReplyKind.TEXT, text=text)

    @classmethod
    def echo(cls) -> Reply:
        return cls(ReplyKind.ECHO)

    @classmethod
    def span(cls, index: int) -> Reply:
        return cls(ReplyKind.SPAN, index=index)

    @classmethod
    def matching(cls, cases: dict[str, str], default: str) -> Reply:
        return cls(ReplyKind.MATCH, text=default, cases=tuple(cases.items()))

    @classmethod
    def script(cls, fn: Callable[[str], str]) -> Reply:
        return cls(ReplyKind.SCRIPT, fn=fn)

    def render(self, messages: list[dict[str, Any]]) -> str:
        """The reply to a call whose messages are `messages`."""
        if self.kind is ReplyKind.TEXT:
            return self.text
        prompt = _last_user_text(messages)
        if self.kind is ReplyKind.ECHO:
            return prompt
        if self.kind is ReplyKind.SCRIPT and self.fn is not None:
            return self.fn(prompt)
        if self.kind is ReplyKind.MATCH:
            return next((reply for word, reply in self.cases if word.lower() in prompt.lower()), self.text)
        spans = prompt_spans(prompt)
        return spans[self.index] if self.index < len(spans) else ""


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):  # content parts: keep the text ones
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


class ScriptedModelServer:
    """`ScriptedModelServer({api_key: Reply})` serves on 127.0.0.1 at `.url` until `close()`."""

    def __init__(self, replies: dict[str, Reply]) -> None:
        self.replies = dict(replies)
        self.calls: dict[str, int] = {}
        self.sent: dict[str, str] = {}  # key -> the last reply sent
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # the check's output stays the report
                pass

            def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code: int, message: str) -> None:
                self._send(code, json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode())

            def _key(self) -> str | None:
                auth = self.headers.get("Authorization", "")
                key = auth.removeprefix("Bearer ").strip()
                return key if key in server.replies else None

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self._key() is None:
                    return self._error(401, "unknown API key")
                if self.path.rstrip("/") != "/v1/models":
                    return self._error(404, f"no route {self.path}")
                self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())

            def do_POST(self) -> None:  # noqa: N802
                key = self._key()
                if key is None:
                    return self._error(401, "unknown API key")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._error(404, f"no route {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    return self._error(413, f"body over {MAX_BODY} bytes")
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    messages = body["messages"]
                    assert isinstance(messages, list)
                except (ValueError, KeyError, AssertionError):
                    return self._error(400, "the body must be JSON with a list of messages")
                with server._lock:
                    server.calls[key] = server.calls.get(key, 0) + 1
                    text = server.sent[key] = server.replies[key].render(messages)
                if body.get("stream"):
                    return self._stream(text)
                self._send(200, json.dumps(_completion(text)).encode())

            def _stream(self, text: str) -> None:
                chunk = {"id": "scripted", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": MODEL, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                                      "finish_reason": "stop"}]}
                body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                self._send(200, body, "text/event-stream")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="scripted-model")
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedModelServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _completion(text: str) -> dict[str, Any]:
    return {"id": "scripted", "object": "chat.completion", "created": int(time.time()), "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
