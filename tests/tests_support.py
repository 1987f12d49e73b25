"""Constants shared by conftest and tests (conftest itself is not importable under importlib mode)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ADMIN_TOKEN = "sk-admin-test-" + "x" * 24

# The heartbeat silence after which tests' schedulers declare an attempt stale. Tests heartbeat fast (0.5-1 s),
# but on a loaded 2-core CI machine a heartbeat (an fsync'd file and a SQLite commit) can stall past a second
# while other tests write checkpoints; a fresh-clone CI run saw a healthy retry declared stale that way under
# the default of 2 heartbeats. Tests that check the detection itself read the configured limit.
TEST_STALE_AFTER_S = 6.0


def child_pids(pid: int) -> list[int]:
    """The live children of process `pid` (a job's own server, say), read from /proc."""
    from pathlib import Path

    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def tiny_train_job(steps: int = 1, eval_size: int = 0, max_tokens: int = 4, training: dict | None = None, **top) -> dict:
    """The smallest `swarm train` job: arithmetic on the tiny model, 2 tasks x 2 episodes a step, `steps`
    steps; `training` adds to its training settings, `top` to (or over) the job's own."""
    return {
        "task": "arithmetic",
        "eval_size": eval_size,
        "max_tokens": max_tokens,
        "concurrency": 4,
        "swarm": {
            "model": {"name": "tiny"},
            "pool": {"batch_size": 2, "group_size": 2},
            "training": {"max_steps": steps, "mini_batch_size": 4, "micro_batch_size": 2, **(training or {})},
        },
        **top,
    }


def train_command(tmp_path, job: dict, run: str = "run") -> tuple[list[str], Path]:
    """Write `job` to tmp_path/job.yaml: the `swarm train` command line for it, and its run dir tmp_path/<run>."""
    import sys

    import yaml

    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    run_dir = tmp_path / run
    return [sys.executable, "-m", "engine.cli", "train", "--config", str(tmp_path / "job.yaml"), "--run-dir", str(run_dir)], run_dir


# Wide enough that rich does not wrap the job's messages, which the tests match whole.
WIDE_TERMINAL = {"COLUMNS": "400"}


def run_swarm_train(cmd: list[str], timeout: float = 600):
    """Run a `swarm train` command line to its end (stdout and stderr captured, wide terminal)."""
    import os
    import subprocess

    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **WIDE_TERMINAL})


def swarm_train_here(cmd: list[str], capsys) -> str:
    """Run a `swarm train` command line (from `train_command`) to its end in this process, through the
    CLI's own `main` (its server is still a subprocess): a subprocess would add only a fresh interpreter's
    start-up. Returns what it printed, whitespace normalised (rich wraps at the captured stream's 80
    columns); fails with it if the command fails. `capsys` is the test's fixture."""
    from engine.cli import main

    capsys.readouterr()  # what the test printed before is not the job's
    code = main(cmd[cmd.index("train") :])
    said = capsys.readouterr()
    assert code == 0, (said.out + said.err)[-3000:]
    return " ".join((said.out + said.err).split())


def swarm_train(tmp_path, job: dict, timeout: float = 600, run: str = "run"):
    """Run `swarm train --config <job>` as a subprocess into tmp_path/<run>; its stderr tail on failure."""
    cmd, run_dir = train_command(tmp_path, job, run)
    out = run_swarm_train(cmd, timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


class BackgroundTrain:
    """`swarm train` started in the background, to be disturbed while it runs: stderr goes to a file
    (nobody reads a pipe while the job runs), and leaving the `with` block kills a job still running."""

    def __init__(self, tmp_path, job: dict, run: str = "run") -> None:
        import os
        import subprocess

        self.cmd, self.run_dir = train_command(tmp_path, job, run)
        self.stderr_path = tmp_path / f"{run}.stderr.txt"
        with open(self.stderr_path, "w") as err_file:
            self.proc = subprocess.Popen(
                self.cmd, stdout=subprocess.DEVNULL, stderr=err_file, env={**os.environ, **WIDE_TERMINAL}
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def metrics_text(self) -> str:
        """The run's metrics.jsonl so far ('' before the first row)."""
        metrics = self.run_dir / "metrics.jsonl"
        return metrics.read_text() if metrics.exists() else ""

    def wait_until(self, reached, what: str, timeout: float = 240, poll_s: float = 0.02) -> None:
        """Poll `reached()` while the job runs; fail with the job's stderr if it exits, or after `timeout`."""
        import time

        deadline = time.monotonic() + timeout
        while not reached():
            assert self.proc.poll() is None, f"the job exited before {what}: " + self.stderr()[-3000:]
            assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
            time.sleep(poll_s)

    def kill_server(self) -> None:
        """SIGKILL the job's training server (its one child process)."""
        import os
        import signal

        (server_pid,) = child_pids(self.proc.pid)
        os.kill(server_pid, signal.SIGKILL)

    def wait(self, timeout: float = 400) -> str:
        """Wait for the job to exit; its stderr."""
        self.proc.wait(timeout=timeout)
        return self.stderr()

    def __enter__(self) -> "BackgroundTrain":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedUvicorn:
    """An ASGI app served by uvicorn on a real loopback port, in a background thread."""

    def __init__(self, app, port: int) -> None:
        import threading
        import time

        import uvicorn

        # The swarm server's own settings (keep-alive above all), so tests see what `swarm serve` runs.
        from engine.server.serve import uvicorn_config

        self._uv = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port))
        self._thread = threading.Thread(target=self._uv.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uv.started:
            if time.monotonic() > deadline:
                raise TimeoutError("uvicorn did not start")
            time.sleep(0.02)

    def close(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=30)


class ScriptedInference:
    """An `InferenceEngine` whose "model" replies from a script, token by token, with a delay per token.

    The tiny model's random weights never write a `<tool_call>`, so the tool-call reply path and
    streaming with tools need replies we choose. Everything else stays real: the server renders and
    records prompts with the real tokenizer, the reply's ids are that tokenizer's encoding of the
    scripted text plus the end-of-turn id (as a sampled reply would end), and `on_token` fires per token
    while "sampling", so streaming is exercised as with a real model. Use `scripted_backend_factory`.
    """

    def __init__(
        self, tokenizer, replies: list[str], stop_token_ids: tuple[int, ...], token_delay_s: float = 0.0
    ):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.stop_token_ids = stop_token_ids
        self.token_delay_s = token_delay_s
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids, params, on_token=None):
        import asyncio

        from engine.backends.base import Completion

        if not self.replies:
            raise AssertionError("the script has no reply left for this call")
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.stop_token_ids[0]]
        for token_id in ids:
            if on_token is not None:
                on_token(0, token_id)
            await asyncio.sleep(self.token_delay_s)
        return [Completion(ids, [-0.5] * len(ids), "stop", text)]

    async def pause(self) -> None:
        return None

    def resume(self) -> None:
        return None

    def close(self) -> None:
        return None


def scripted_backend_factory(replies: list[str], token_delay_s: float = 0.0):
    """A backend factory: the real torch backend (tiny model, tokenizer, trainer) with scripted inference."""

    def make(cfg):
        from engine.server.serve import default_backend_factory

        backend = default_backend_factory(cfg)
        stops = backend.inference.stop_token_ids
        backend.inference.close()
        backend.inference = ScriptedInference(backend.tokenizer, replies, stops, token_delay_s)
        return backend

    return make


def serve_process(run_dir, port: int, *extra: str):
    """`swarm serve --run-dir RUN_DIR --port PORT [extra]` as a subprocess with ADMIN_TOKEN; waits for /health."""
    import os
    import subprocess
    import sys
    import time

    import httpx

    env = {**os.environ, "SWARM_ADMIN_TOKEN": ADMIN_TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--run-dir", str(run_dir), "--port", str(port), *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300  # a loaded 2-core machine: the wait ends as soon as the server answers
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise TimeoutError("server did not come up")


def load_benchmark(name: str):
    """Import `benchmarks/<name>.py` (a script, not a package) as module `name`, for its pure helpers."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _JsonHandler(BaseHTTPRequestHandler):
    """Request handler of the scripted servers: quiet, JSON in and out."""

    def log_message(self, *args):  # keep test output clean
        pass

    def read_json(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _ScriptedServer:
    """A ThreadingHTTPServer on 127.0.0.1 in a daemon thread; `close` stops it."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> int:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self.httpd.server_address[1]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeOpenAIServer(_ScriptedServer):
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that replays scripted replies and records requests.

    The only fake in the project: it stands in for the external LLM provider. A reply is a string (the
    assistant message content) or an int (an HTTP error status with an OpenAI-style error body).
    """

    def __init__(self, replies: list[str | int]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        outer = self

        class Handler(_JsonHandler):
            def do_POST(self):
                body = self.read_json()
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
                self.send_json(status, payload)

        self.url = f"http://127.0.0.1:{self._serve(Handler)}/v1"


class ScriptedVllmServer(_ScriptedServer):
    """A vLLM-shaped token-in/token-out server on 127.0.0.1: `/v1/completions` (JSON or SSE stream, with
    vLLM's `token_ids` extension) replays scripted choices, and the runtime LoRA routes answer; every
    request is recorded (path and body) in order.

    Stands in for vLLM (an external engine that needs a GPU), like FakeOpenAIServer stands in for an LLM
    provider. A script item is an int (HTTP error status) or a dict: {"choices": [{"token_ids", "logprobs",
    "text", "finish_reason"}, ...], "delay_s": seconds before answering}. `lora_status` is the status the
    LoRA routes answer (404 mimics a server started without runtime LoRA updating).
    """

    def __init__(self, script: list, lora_status: int = 200):
        import time

        self.script = list(script)
        self.requests: list[dict] = []
        self.lora_status = lora_status
        outer = self

        class Handler(_JsonHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.read_json()
                outer.requests.append({"path": self.path, "body": body})
                if self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
                    if outer.lora_status != 200:
                        return self.send_json(outer.lora_status, {"detail": "Not Found"})
                    return self.send_json(200, {"status": "ok"})
                item = outer.script.pop(0) if outer.script else 500
                if isinstance(item, int):
                    return self.send_json(
                        item, {"error": {"message": f"scripted {item}", "type": "BadRequestError"}}
                    )
                time.sleep(item.get("delay_s", 0.0))
                choices = [
                    {
                        "index": i,
                        "text": c.get("text", ""),
                        "token_ids": c.get("token_ids"),
                        "logprobs": None if c.get("logprobs") is None else {"token_logprobs": c["logprobs"]},
                        "finish_reason": c.get("finish_reason", "stop"),
                    }
                    for i, c in enumerate(item["choices"])
                ]
                if not body.get("stream"):
                    for ch in choices:
                        if ch["token_ids"] is None:
                            del ch["token_ids"]
                    return self.send_json(
                        200, {"id": "cmpl-1", "object": "text_completion", "choices": choices}
                    )
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                # One token per chunk per choice, interleaved across choices, as vLLM streams deltas.
                longest = max(len(c["token_ids"] or []) for c in choices)
                for t in range(longest):
                    for ch in choices:
                        ids = ch["token_ids"] or []
                        if t < len(ids):
                            lps = (ch["logprobs"] or {}).get("token_logprobs") or []
                            last = t == len(ids) - 1
                            delta = {
                                "index": ch["index"],
                                "text": ch["text"] if last else "",
                                "token_ids": [ids[t]],
                                "logprobs": {"token_logprobs": lps[t : t + 1]},
                                "finish_reason": ch["finish_reason"] if last else None,
                            }
                            self.wfile.write(f"data: {json.dumps({'choices': [delta]})}\n\n".encode())
                            self.wfile.flush()
                for ch in choices:  # a server without return_token_ids support streams text only
                    if ch["token_ids"] is None:
                        delta = {
                            "index": ch["index"],
                            "text": ch["text"],
                            "finish_reason": ch["finish_reason"],
                        }
                        self.wfile.write(f"data: {json.dumps({'choices': [delta]})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.url = f"http://127.0.0.1:{self._serve(Handler)}"

    def completions(self) -> list[dict]:
        """The bodies of the /v1/completions requests received, in order."""
        return [r["body"] for r in self.requests if r["path"] == "/v1/completions"]


# -- GPU backend end-to-end tests (tests/engine/backends/test_*_gpu.py) -----------------------------------
GPU_PROBE_PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]


def greedy_logprobs(srv) -> list[float]:
    """The log-probs a live server records for a short greedy reply to a fixed prompt: they change exactly
    when the weights it serves change."""
    with srv.client() as c:
        ep = c.begin_episode("probe", is_eval=True)
        ep.openai().chat.completions.create(model="m", messages=GPU_PROBE_PROMPT, max_tokens=6, temperature=0)
        lp = list(srv.server.episodes.get(ep.api_key).tracker.timelines[-1].blocks[-1].logprobs)
        ep.end(0.0)
        return lp


def train_one_step(srv, timeout: float) -> dict:
    """Two tasks x two sampled episodes with rewards 0 and 1 (one batch of a 2 x 2 pool); the server's
    status once it has taken step 1."""
    with srv.client() as c:
        for t in range(2):
            for g in range(2):
                with c.episode(f"task-{t}") as ep:
                    ep.openai().chat.completions.create(
                        model="m", messages=GPU_PROBE_PROMPT, max_tokens=8, temperature=1.0
                    )
                    ep.end(float(g))
        return c.wait_for_step(1, timeout=timeout)


def tiny_vibe_job(root, batch: int, group: int):
    """The client's vibe.yaml switched to the tiny model with B tasks x N plays per step; the new job."""
    from vibe.config import VibeJob

    job = VibeJob.load(root / "vibe.yaml")
    swarm = job.swarm.model_dump() | {"model": {"name": "tiny"}}
    swarm["pool"] |= {"batch_size": batch, "group_size": group}
    swarm["training"] |= {"mini_batch_size": batch * group, "micro_batch_size": batch * group}
    job = VibeJob.model_validate(job.model_dump() | {"swarm": swarm})
    (root / "vibe.yaml").write_text(job.to_yaml())
    return job


def run_campaign_and_close(ws, policy, config, timeout_s: float) -> dict:
    """`a3r.leader.run_campaign` to its end, then the workspace's monitor, workers and store shut down
    whatever happened (a failed campaign must not leave tmux sessions behind for the next test)."""
    from a3r.leader import run_campaign

    try:
        return run_campaign(ws, policy, config, timeout_s=timeout_s)
    finally:
        ws.stop_monitor()
        ws.shutdown()
        ws.close()
