"""What the swarm server adds to an LLM call, measured side by side with a bare HTTP echo endpoint.

Both servers run in this process's machine as real uvicorn servers on loopback; clients are threads
doing the same POST /v1/chat/completions. The swarm server runs the real path (episode key lookup,
validation, chat-template rendering, dynamic batching, token-level recording) with the `tiny` model and
max_tokens=1, so model compute is as small as it gets; the model's own share is reported separately
(the engine's generate() timed in-process), so "added latency" = swarm p50 - echo p50 - model p50.

    python benchmarks/server_overhead.py --episodes 1 16 64 --calls 8 --out docs/benchmarks/server_overhead.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import uvicorn
from fastapi import FastAPI, Request
from rich.console import Console
from rich.table import Table

from engine.backends.base import SamplingParams
from engine.client import SwarmClient
from engine.config import SwarmConfig
from engine.jobs import ServerProcess, free_port
from engine.tracking import render_prompt

MSGS = [{"role": "user", "content": "What is 17 + 25? Answer with just the number."}]


def echo_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "echo"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    return app


def start_echo() -> tuple[str, uvicorn.Server]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(echo_app(), host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{port}/v1", server


def drive(base_urls: list[str], keys: list[str], calls: int) -> tuple[list[float], float]:
    """Each episode (thread) makes `calls` sequential calls; returns per-call latencies and wall time."""
    body = {"model": "m", "messages": MSGS, "max_tokens": 1, "temperature": 0}

    def one(i: int) -> list[float]:
        out = []
        with httpx.Client(timeout=120) as http:
            for _ in range(calls):
                t = time.perf_counter()
                r = http.post(
                    base_urls[i] + "/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {keys[i]}"},
                )
                r.raise_for_status()
                out.append(time.perf_counter() - t)
        return out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(base_urls)) as pool:
        lat = [x for xs in pool.map(one, range(len(base_urls))) for x in xs]
    return lat, time.perf_counter() - t0


def model_only_p50(n: int = 30) -> float:
    """The tiny model's own generate() time for this prompt and max_tokens=1, in-process."""
    from engine.backends.torch.inference import TorchInferenceEngine
    from engine.config import ModelConfig
    from engine.models import load_model

    lm = load_model(ModelConfig(name="tiny"))
    eng = TorchInferenceEngine(lm.model, lm.tokenizer)
    ids = render_prompt(lm.tokenizer, MSGS).token_ids
    params = SamplingParams(max_new_tokens=1, temperature=0.0)

    async def run() -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await eng.generate(ids, params)
            out.append(time.perf_counter() - t)
        return out

    times = asyncio.run(run())
    eng.close()
    return statistics.median(times)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    echo_url, echo = start_echo()
    swarm = ServerProcess(run_dir=None)
    client = SwarmClient(swarm.url, admin_token=swarm.token)
    client.configure(SwarmConfig(episodes={"idle_timeout_s": 3600}))
    client.start(wait=True)
    model_p50 = model_only_p50()
    rows = []
    for n in args.episodes:
        eps = [client.begin_episode(f"bench-{i}") for i in range(n)]
        s_lat, s_wall = drive([e.base_url for e in eps], [e.api_key for e in eps], args.calls)
        for e in eps:
            e.abort()
        e_lat, e_wall = drive([echo_url] * n, ["x"] * n, args.calls)
        rows.append(
            {
                "episodes": n,
                "calls": n * args.calls,
                "echo_p50_ms": 1000 * statistics.median(e_lat),
                "swarm_p50_ms": 1000 * statistics.median(s_lat),
                "swarm_p95_ms": 1000 * pct(s_lat, 0.95),
                "model_p50_ms": 1000 * model_p50,
                "added_p50_ms": 1000 * (statistics.median(s_lat) - statistics.median(e_lat) - model_p50),
                "echo_calls_per_s": n * args.calls / e_wall,
                "swarm_calls_per_s": n * args.calls / s_wall,
            }
        )
    client.close()
    swarm.stop()
    echo.should_exit = True

    t = Table(title="swarm server vs bare HTTP echo (tiny model, max_tokens=1)")
    for k in rows[0]:
        t.add_column(k, justify="right")
    for r in rows:
        t.add_row(*(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()))
    Console().print(t)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
