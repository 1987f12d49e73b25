"""The LLM judge of a vibe client, on the trusted side of the sandbox.

A client whose `vibe.yaml` has a `judge:` (an `engine.rewards.judge_config.JudgeConfig`) grades replies
with `vibe.judge_client.grade` from its `reward.py`. The sandbox has no network, and the judge's key must
not reach client code, so the judge never runs inside it: `judge_access` starts a `JudgeService` here (a
loopback HTTP server holding the `LLMJudge`, with its key, cache, retries, timeouts and fallback) and
carries its port into every sandboxed child over a unix socket (vibe.netbridge), announced by
`VIBE_JUDGE_URL` and `VIBE_JUDGE_BRIDGE`.

The judge's own calls never train: it talks to its own endpoint with its own client (a swarm server
`swarm_url` sees them as eval episodes, which never enter the pool), never to the policy episode's key.

    POST /grade {"prompt": ..., "reply": ...}   with `Authorization: Bearer <VIBE_JUDGE_TOKEN>`
      200 {"reward": r, "fallback": bool}   r in [0, 1]
      503 {"error": ...}                     the judge could not grade it (fallback=exclude)
      500 {"error": ...}                     the judge is misconfigured (key, model name, URL)
      401 {"error": ...}                     no or a wrong token

The service listens on loopback, where any local process can connect; the token (fresh per service,
handed only to the client's sandboxed children) keeps them from spending the judge's key.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from engine.rewards.judge import JudgeMisconfigured, JudgeUnavailable, LLMJudge
from engine.rewards.judge_config import JudgeConfig
from vibe.judge_client import BRIDGE_ENV, TOKEN_ENV, URL_ENV
from vibe.netbridge import UnixToTcp
from vibe.sandbox import extra_access

__all__ = ["JudgeService", "judge_access"]

MAX_BODY = 1 << 20


class JudgeService:
    """`judge` behind POST /grade on 127.0.0.1 (a free port); stop with `close()` or a `with` block."""

    def __init__(self, judge: LLMJudge) -> None:
        self.judge = judge
        self.token = secrets.token_urlsafe(24)
        expected = f"Bearer {self.token}".encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # the check's output stays the report
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                if not hmac.compare_digest((self.headers.get("Authorization") or "").encode(), expected):
                    return self._send(401, {"error": f"the judge service needs its token (${TOKEN_ENV})"})
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    if self.path != "/grade" or length > MAX_BODY:
                        raise ValueError("POST /grade with a JSON body {prompt, reply}")
                    body = json.loads(self.rfile.read(length))
                    prompt, reply = body["prompt"], body["reply"]
                    if not isinstance(prompt, str) or not isinstance(reply, str):
                        raise ValueError("prompt and reply must be strings")
                except (ValueError, KeyError, TypeError) as e:
                    return self._send(400, {"error": str(e)})
                try:
                    v = judge.score(prompt, reply)
                except JudgeUnavailable as e:
                    return self._send(503, {"error": str(e)})
                except JudgeMisconfigured as e:
                    return self._send(500, {"error": str(e)})
                self._send(200, {"reward": v.reward, "fallback": v.fallback})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="judge-service")
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> JudgeService:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def judge_access(cfg: JudgeConfig | None) -> Iterator[LLMJudge | None]:
    """While inside, sandboxed children reach the judge of `cfg` (vibe.judge_client); yields the judge
    (None, and nothing started, when the client has no judge). The judge's key is read here, from this
    process's environment (`cfg.api_key_env` or `cfg.admin_token_env`): a ConfigError when it is unset."""
    if cfg is None:
        yield None
        return
    judge = LLMJudge(cfg)
    with contextlib.ExitStack() as stack:
        service = stack.enter_context(JudgeService(judge))
        bridges = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vibe-judge-")))
        sock = bridges / "judge.sock"
        stack.enter_context(UnixToTcp(sock, service.port))
        env = {URL_ENV: f"http://127.0.0.1:{service.port}", BRIDGE_ENV: str(sock), TOKEN_ENV: service.token}
        stack.enter_context(extra_access(env, [bridges]))
        yield judge
