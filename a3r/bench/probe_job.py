"""The throughput probe: a swarm server of the benchmarked commit answering concurrent chat calls.

Run by `harness.py` with the commit's interpreter and engine (`python probe_job.py probe.json`). It starts
`swarm serve` on loopback (`engine.jobs.ServerProcess`), loads the model, makes `warmup_calls` calls that
are not timed, then runs `episodes` eval episodes at once (eval: they never enter training), each making
`calls` sequential chat calls of at most `max_tokens` tokens, and writes one metrics line: calls per
second and completion tokens per second over the timed wall time, and the median call latency.
Only the engine's public client API is used, so it runs against any commit that has that API.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import Series  # this script's own directory is first on sys.path: a3r/bench/harness.py

PROMPT = [{"role": "user", "content": "What is 17 + 25? Answer with just the number."}]


def _episode(client, i: int, calls: int, max_tokens: int) -> tuple[list[float], int]:
    latencies, tokens = [], 0
    with client.episode(task_id=f"probe-{i}", is_eval=True) as ep:
        oa = ep.openai(max_retries=0)
        for _ in range(calls):
            t = time.perf_counter()
            r = oa.chat.completions.create(
                model=ep.model, messages=PROMPT, max_tokens=max_tokens, temperature=1.0
            )
            latencies.append((time.perf_counter() - t) * 1000)
            tokens += r.usage.completion_tokens if r.usage else 0
        ep.end(reward=0.0)
    return latencies, tokens


def main(argv: list[str]) -> int:
    from engine.config import SwarmConfig
    from engine.jobs import ServerProcess

    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    server = ServerProcess(None, log_path=out.with_name("server.log"))
    try:
        with server.client("probe") as client:
            client.configure(
                SwarmConfig.model_validate({"model": {"name": spec["model"], "seed": spec["seed"]}})
            )
            client.start(wait=True)
            if spec["warmup_calls"]:
                _episode(client, -1, spec["warmup_calls"], spec["max_tokens"])
            n = spec["episodes"]
            t0 = time.perf_counter()
            with ThreadPoolExecutor(n) as pool:
                results = list(
                    pool.map(lambda i: _episode(client, i, spec["calls"], spec["max_tokens"]), range(n))
                )
            wall = time.perf_counter() - t0
    finally:
        server.stop()
    latencies = [x for lat, _ in results for x in lat]
    tokens = sum(t for _, t in results)
    line = {
        "step": 0,
        Series.CALLS_PER_S: len(latencies) / wall,
        Series.GEN_TOKENS_PER_S: tokens / wall,
        Series.LATENCY_P50: statistics.median(latencies),
    }
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    print(f"probe: {len(latencies)} calls in {wall:.2f} s: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
