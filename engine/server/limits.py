"""Bounds on what one request may cost the server before any real work is done for it.

- `BodyLimit`: ASGI middleware that refuses a body over a cap. A declared `Content-Length` over the cap is
  answered 413 before a byte of the body is read; a body without one (chunked) is read here and refused
  as soon as it passes the cap. Without it one 50 MB prompt made the server parse, hold and tokenise
  all of it.
- `prompt_tokens_lower_bound`: a cheap lower bound on a chat request's prompt length in tokens, from its
  character count alone, so an over-long conversation is refused before the chat template and the
  tokenizer run over it.

It does not bound the time a request may take (episode deadlines do) nor the number of requests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Scope = dict[str, Any]


def _too_large_message(limit: int, size: int | None) -> str:
    got = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return (
        f"request body is {got}, over this server's cap of {limit} bytes (episodes.max_request_bytes); "
        "shorten the conversation, or raise the cap (and max_context_tokens) in the server's config"
    )


class BodyLimit:
    """Pure ASGI middleware: HTTP request bodies over `limit()` bytes are refused with 413.

    `limit` is read per request, so a server reconfigured with a new cap applies it at once.
    """

    def __init__(self, app: Callable, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _send_413(send, _too_large_message(limit, declared))
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the HTTP parser delivers no more than it declared
            return
        # No declared length (chunked): read the body here, up to the cap, then hand it on.
        chunks: list[bytes] = []
        received, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away mid-body
                return
            chunks.append(message.get("body", b""))
            received += len(chunks[-1])
            more = message.get("more_body", False)
            if received > limit:
                await _send_413(send, _too_large_message(limit, None))
                return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later messages: the disconnect

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP parser refuses a malformed length before we get here
    return None


async def _send_413(send: Callable, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": "request_too_large"}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def max_token_chars(tokenizer: Any) -> int:
    """The most characters one token of `tokenizer` can stand for (at least 1).

    A vocabulary entry's spelling is at least as long as the text it decodes to: byte-level BPE spells
    each byte as one character (a character is one or more bytes), SentencePiece spells pieces as the
    text itself (byte-fallback pieces like `<0xE3>` are longer than their one byte). Special tokens are
    included, which only makes the bound looser.
    """
    return max((len(piece) for piece in tokenizer.get_vocab()), default=1) or 1


def _text_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # OpenAI content parts
        return sum(len(p.get("text") or "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


def prompt_tokens_lower_bound(messages: Any, token_chars: int) -> int:
    """At least this many tokens render from `messages`, counting only what no chat template drops.

    Chat templates copy system, user and tool content into the prompt verbatim; some rewrite earlier
    assistant turns (dropping their reasoning), so assistant content is not counted. Each token covers
    at most `token_chars` characters, so the prompt has at least chars / token_chars tokens.
    """
    if not isinstance(messages, list):
        return 0
    chars = sum(_text_chars(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") != "assistant")
    return -(-chars // token_chars)
