"""What the swarm server adds to an LLM call, measured side by side with a bare HTTP echo endpoint.

Three sides, driven the same way by client threads (E concurrent episodes of `--calls` sequential calls):
- swarm: a real `swarm serve` subprocess with the `tiny` model and max_tokens=1, on the full path (episode
  key lookup, validation, chat-template rendering, dynamic batching, token-level recording);
- echo: a bare FastAPI endpoint in its own process, with the swarm server's uvicorn settings, that parses
  the request and returns a fixed completion;
- model: the same model's generate() in this process with the same concurrency (no HTTP), so batching and
  queueing inside the engine count as model time.
Added latency = swarm p50 - model p50; the target compares it with echo p50 at the same concurrency.
Repeats are interleaved (the side order rotates); the JSON has every run, the load, and the machine.

    .venv/bin/python benchmarks/server_overhead.py --episodes 1 16 64 --calls 8 --out docs/benchmarks/server_overhead
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, Request
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import fmt_spread, loadavg, machine_record, rotated, spread  # noqa: E402
from engine.backends.base import SamplingParams  # noqa: E402
from engine.client import SwarmClient  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.jobs import ServerProcess, free_port  # noqa: E402
from engine.server.serve import uvicorn_config  # noqa: E402
from engine.tracking import render_prompt  # noqa: E402

SIDES = ("swarm", "echo", "model")
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


class EchoProcess:
    """The echo endpoint as its own process (like the swarm server), with the swarm server's uvicorn settings."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-echo", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.post(self.url + "/chat/completions", json={"messages": MSGS}, timeout=1.0)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError("the echo endpoint did not come up within 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


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


class ModelOnly:
    """The tiny model's own time for the same calls: the engine's generate() in-process, no HTTP, with the same
    concurrency (E tasks of `calls` sequential calls), so batching and queueing in the engine count as model time."""

    def __init__(self) -> None:
        from engine.backends.torch.inference import TorchInferenceEngine
        from engine.config import ModelConfig
        from engine.models import load_model

        lm = load_model(ModelConfig(name="tiny"))
        self.engine = TorchInferenceEngine(lm.model, lm.tokenizer, stop_token_ids=list(lm.end_of_turn_ids))
        self.ids = render_prompt(lm.tokenizer, MSGS).token_ids

    def drive(self, episodes: int, calls: int) -> tuple[list[float], float]:
        params = SamplingParams(max_new_tokens=1, temperature=0.0)

        async def episode() -> list[float]:
            out = []
            for _ in range(calls):
                t = time.perf_counter()
                await self.engine.generate(self.ids, params)
                out.append(time.perf_counter() - t)
            return out

        async def run() -> list[float]:
            per = await asyncio.gather(*(episode() for _ in range(episodes)))
            return [x for xs in per for x in xs]

        t0 = time.perf_counter()
        lat = asyncio.run(run())
        return lat, time.perf_counter() - t0

    def close(self) -> None:
        self.engine.close()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(side: str, n: int, calls: int, echo: EchoProcess, client: SwarmClient, model: ModelOnly):
    if side == "echo":
        return drive([echo.url] * n, ["x"] * n, calls)
    if side == "model":
        return model.drive(n, calls)
    eps = [client.begin_episode(f"bench-{i}") for i in range(n)]
    try:
        return drive([e.base_url for e in eps], [e.api_key for e in eps], calls)
    finally:
        for e in eps:
            e.abort()


def summarise(runs: list[dict], episodes: list[int]) -> list[dict]:
    rows = []
    for n in episodes:
        reps = sorted({r["repeat"] for r in runs if r["episodes"] == n})

        def p50(side: str, rep: int, n: int = n) -> float:
            return next(r for r in runs if r["episodes"] == n and r["side"] == side and r["repeat"] == rep)["p50_ms"]

        def cps(side: str, n: int = n) -> float:
            return statistics.median(
                r["calls_per_s"] for r in runs if r["episodes"] == n and r["side"] == side
            )

        # added = what the swarm server adds beyond the model's own time; compared with the echo endpoint
        added = [p50("swarm", k) - p50("model", k) for k in reps]
        rows.append(
            {
                "episodes": n,
                "echo_p50_ms": statistics.median(p50("echo", k) for k in reps),
                "swarm_p50_ms": statistics.median(p50("swarm", k) for k in reps),
                "model_p50_ms": statistics.median(p50("model", k) for k in reps),
                "added_p50_ms": statistics.median(added),
                "added_over_echo": spread([a / p50("echo", k) for a, k in zip(added, reps, strict=True)]),
                "echo_calls_per_s": cps("echo"),
                "swarm_calls_per_s": cps("swarm"),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats (the side order rotates)")
    ap.add_argument("--out", default=None, help="write OUT.json (and OUT.md)")
    ap.add_argument("--serve-echo", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_echo:
        uvicorn.Server(uvicorn_config(echo_app(), "127.0.0.1", args.serve_echo, "error")).run()
        return

    load_before = loadavg()
    echo = EchoProcess()
    swarm = ServerProcess(run_dir=None)
    client = SwarmClient(swarm.url, admin_token=swarm.token)
    model = ModelOnly()
    runs = []
    try:
        client.configure(SwarmConfig(episodes={"idle_timeout_s": 3600}))
        client.start(wait=True)
        for n in args.episodes:  # warm-up: first calls pay for lazy imports and allocations
            for side in SIDES:
                measure(side, n, 1, echo, client, model)
        for rep in range(args.repeats):
            for n in args.episodes:
                for side in rotated(SIDES, rep):
                    load = loadavg()[0]
                    lat, wall = measure(side, n, args.calls, echo, client, model)
                    runs.append(
                        {
                            "repeat": rep,
                            "episodes": n,
                            "side": side,
                            "p50_ms": 1000 * statistics.median(lat),
                            "p95_ms": 1000 * pct(lat, 0.95),
                            "calls_per_s": len(lat) / wall,
                            "load1_before": load,
                        }
                    )
                    print(f"repeat {rep} E={n:>3} {side:>5}: p50 {runs[-1]['p50_ms']:7.1f} ms  "
                          f"{runs[-1]['calls_per_s']:6.1f} calls/s  load {load:.1f}", flush=True)
    finally:
        client.close()
        swarm.stop()
        echo.stop()
        model.close()
    rows = summarise(runs, args.episodes)
    t = Table(title="swarm server vs bare HTTP echo (tiny model, max_tokens=1), medians over repeats")
    for k in rows[0]:
        t.add_column(k, justify="right")
    for r in rows:
        t.add_row(*(fmt_spread(v) if isinstance(v, dict) else f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()))
    Console().print(t)
    if args.out:
        out = Path(args.out)
        out.with_suffix(".json").write_text(
            json.dumps({"command": " ".join(sys.argv), "args": vars(args), "machine": machine_record(load_before),
                        "rows": rows, "runs": runs}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
