"""Fixtures for the leader tests: a real workspace store, and a helper that records runs in it the way a
worker would (dispatch, running, metric points, finish, settle), for synthetic campaigns without tmux."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from a3r.api import Workspace
from a3r.blueprints import canonical_json
from a3r.config import HostSpec, WorkspaceConfig
from a3r.states import FailureKind, RunState


@pytest.fixture
def ws(tmp_path):
    w = Workspace.create(tmp_path / "ws", WorkspaceConfig(hosts=[HostSpec(name="local", slots=1)]))
    yield w
    w.close()


def record_attempt(
    ws: Workspace,
    run_id: int,
    curve: list[tuple[int, float]],
    *,
    outcome: str = "succeeded",
    retry: bool = False,
    metric: str = "eval_accuracy",
) -> None:
    """One attempt of `run_id` on local/0 that logged `curve` (points of `metric`) and ended `outcome`
    (succeeded or failed).

    A failed attempt is settled as a retry (run back to pending) when `retry`, else as a final failure.
    """
    run = ws.store.get_run(run_id)
    cfg = ws.store.blueprint_of(run).effective_config(run.seed)
    att = ws.store.dispatch(
        run_id, host="local", slot="0", run_dir=f"/runs/{run_id}", config_json=canonical_json(cfg)
    )
    assert att is not None, "slot busy or run not pending"
    ws.store.mark_running(att.id)
    ws.store.ingest_metrics(
        att.id, [(s, metric, v) for s, v in curve], expected_offset=0, new_offset=1
    )
    if outcome == "succeeded":
        ws.store.finish_attempt(att.id, "succeeded", exit_code=0)
        ws.store.settle_run(run_id, att.id, RunState.SUCCEEDED)
        return
    kind = FailureKind.INFRASTRUCTURE.value if retry else FailureKind.CODE_ERROR.value
    ws.store.finish_attempt(att.id, "failed", exit_code=1, failure_kind=kind, reason=f"{kind} (synthetic)")
    ws.store.settle_run(
        run_id,
        att.id,
        RunState.PENDING if retry else RunState.FAILED,
        failure_kind=None if retry else kind,
        next_fix="retry after infrastructure failure" if retry else None,
    )


@pytest.fixture
def record() -> Callable[..., None]:
    return record_attempt


class FakeOpenAIServer:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that replays scripted replies and records requests.

    The only fake in the project: it stands in for the external LLM provider. A reply is a string (the
    assistant message content) or an int (an HTTP error status with an OpenAI-style error body).
    """

    def __init__(self, replies: list[str | int]):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.replies = list(replies)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                reply = outer.replies.pop(0) if outer.replies else 500
                if isinstance(reply, int):
                    payload, status = (
                        {"error": {"message": "scripted failure", "type": "server_error"}},
                        reply,
                    )
                else:
                    payload, status = (
                        {
                            "id": f"chatcmpl-{len(outer.requests)}",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body.get("model", "fake"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": reply},
                                }
                            ],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        },
                        200,
                    )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_llm():
    servers: list[FakeOpenAIServer] = []

    def start(replies: list[str | int]) -> FakeOpenAIServer:
        servers.append(FakeOpenAIServer(replies))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
