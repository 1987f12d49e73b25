"""Prefix caching in TorchInferenceEngine: sampling time with the cache against the uncached path.

Two workloads, each timed with a fresh engine per arm (an empty cache at the start), arms interleaved
(their order rotates every repeat), `--repeats` times:

- episode: `--episodes` concurrent calculator episodes of `--calls` calls each (default one episode of
  12 calls). Every call re-sends the whole history, as the server receives it: the calculator task's chat
  prompt with its tool schema, then per call the sampled reply's token ids followed by a tool turn
  (the chat template's tokens for a tool message with a number).
- group: `--group-size` calls of one prompt (a GRPO group), issued in `--waves` waves one after another
  (waves=1: all at once, where identical prompts already share one prefill row without the cache;
  waves=group-size: one call at a time, like a client that runs its group's episodes sequentially).

End-of-turn tokens are ignored so both arms do the same work (`--new-tokens` per call); seeded sampling,
so the arms sample the same tokens (checked: the script fails if they differ). The ratio is uncached
seconds over cached seconds per repeat (above 1: the cache is faster); reported as median (min-max) with
the load average before and after, since a shared machine skews wall time.

    python benchmarks/prefix_cache.py --threads 2 --out runs/prefix_cache.json
    python benchmarks/prefix_cache.py --model tiny --calls 3 --new-tokens 8 --repeats 1 --out /tmp/pc-smoke.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import fmt_spread, loadavg, machine_record, rotated, spread, timed_engine_run  # noqa: E402
from engine.backends.base import SamplingParams  # noqa: E402
from engine.backends.torch import TorchInferenceEngine  # noqa: E402
from engine.config import ModelConfig  # noqa: E402
from engine.models import load_model  # noqa: E402
from engine.tasks.calculator import TOOLS, CalculatorAgent  # noqa: E402

ARMS = ("uncached", "cached")
PLACEHOLDER = "@@reply@@"


def calculator_prompt(tokenizer: Any, index: int) -> list[int]:
    """The first call of a calculator episode: its user message with the tool schema, as the server renders it."""
    item = CalculatorAgent().dataset(index + 1, seed=0)[index]
    msgs = [{"role": "user", "content": item.prompt}]
    return list(
        tokenizer.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=True, return_dict=False)
    )


def tool_turn(tokenizer: Any, value: int) -> list[int]:
    """Token ids the chat template puts after an assistant reply's text: end of turn, a tool message with
    `value`, and the next assistant header."""
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": PLACEHOLDER},
        {"role": "tool", "content": str(value)},
    ]
    text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text.split(PLACEHOLDER, 1)[1], add_special_tokens=False)


async def episode(
    engine, tokenizer, prompt: list[int], calls: int, new_tokens: int, seed: int
) -> list[list[int]]:
    out = []
    for k in range(calls):
        params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=seed * 1000 + k)
        (c,) = await engine.generate(prompt, params)
        out.append(c.token_ids)
        prompt = prompt + c.token_ids + tool_turn(tokenizer, 100 + k)
    return out


async def episodes(engine, tokenizer, prompts, calls, new_tokens) -> list[list[int]]:
    runs = await asyncio.gather(
        *[episode(engine, tokenizer, p, calls, new_tokens, i) for i, p in enumerate(prompts)]
    )
    return [ids for run in runs for ids in run]


async def group(engine, prompt, size: int, waves: int, new_tokens: int) -> list[list[int]]:
    out, per_wave = [], -(-size // waves)
    for start in range(0, size, per_wave):
        params = [
            SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=s)
            for s in range(start, min(size, start + per_wave))
        ]
        done = await asyncio.gather(*[engine.generate(prompt, p) for p in params])
        out += [c.token_ids for (c,) in done]
    return out


async def _warm_up(engine) -> None:
    """First-call allocations; the cached arm then starts from an empty cache, as the uncached one does."""
    await engine.generate([1, 2, 3], SamplingParams(max_new_tokens=2))
    if engine.prefix_cache is not None:
        engine.prefix_cache.clear()


def measure(loaded, arm: str, workload, cache_bytes: int) -> dict:
    engine = TorchInferenceEngine.from_loaded(
        loaded, stop_token_ids=[], prefix_cache_bytes=cache_bytes if arm == "cached" else 0
    )
    tokens, seconds, cpu = timed_engine_run(engine, _warm_up, workload)
    cache = engine.prefix_cache
    return {
        "arm": arm,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "prefill_tokens": engine.stats.prefill_tokens,
        "forward_passes": engine.stats.forward_passes,
        "cache_hits": cache.stats.hits if cache else 0,
        "reused_tokens": cache.stats.reused_tokens if cache else 0,
        "tokens": tokens,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", default="smollm2-135m", help="model name as in ModelConfig (default smollm2-135m)"
    )
    ap.add_argument("--calls", type=int, default=12, help="calls per calculator episode")
    ap.add_argument("--episodes", type=int, default=1, help="concurrent calculator episodes")
    ap.add_argument("--group-size", type=int, default=8, help="calls of one prompt in the group workload")
    ap.add_argument("--waves", type=int, default=2, help="the group's calls arrive in this many waves")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens sampled per call")
    ap.add_argument("--cache-mib", type=int, default=256, help="the cached arm's prefix_cache budget")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of both arms")
    ap.add_argument("--out", type=Path, required=True, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if min(args.calls, args.episodes, args.group_size, args.waves, args.new_tokens, args.repeats) < 1:
        ap.error("--calls, --episodes, --group-size, --waves, --new-tokens and --repeats must be >= 1")

    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(ModelConfig(name=args.model), device="cpu")
    tok = loaded.tokenizer
    starts = [calculator_prompt(tok, i) for i in range(args.episodes)]
    workloads = {
        "episode": lambda eng: episodes(eng, tok, starts, args.calls, args.new_tokens),
        "group": lambda eng: group(eng, starts[0], args.group_size, args.waves, args.new_tokens),
    }
    load_before = loadavg()
    rows = []
    for rep in range(args.repeats):
        for name, work in workloads.items():
            by_arm = {}
            for arm in rotated(ARMS, rep):
                r = measure(loaded, arm, work, args.cache_mib << 20)
                by_arm[arm] = r
                r.update(workload=name, repeat=rep, load1=loadavg()[0])
                rows.append(r)
                print(
                    f"  rep {rep} {name:<8} {arm:<9} {r['seconds']:8.2f} s  {r['cpu_seconds']:8.2f} cpu-s  "
                    f"prefill {r['prefill_tokens']} tokens, {r['cache_hits']} hits  (load {r['load1']:.1f})",
                    file=sys.stderr,
                )
            if by_arm["cached"]["tokens"] != by_arm["uncached"]["tokens"]:
                print(f"FAIL: {name} sampled different tokens with the cache (repeat {rep})", file=sys.stderr)
                return 1
    for r in rows:
        r["tokens"] = sum(len(t) for t in r["tokens"])

    ratios = {}
    for name in workloads:
        per = {key: [] for key in ("seconds", "cpu_seconds")}
        for rep in range(args.repeats):
            arm = {r["arm"]: r for r in rows if r["workload"] == name and r["repeat"] == rep}
            for key in per:
                per[key].append(arm["uncached"][key] / arm["cached"][key])
        ratios[name] = {f"uncached_over_cached_{key}": spread(v) for key, v in per.items()}
        print(
            f"{name}: uncached/cached wall {fmt_spread(ratios[name]['uncached_over_cached_seconds'])}, "
            f"cpu {fmt_spread(ratios[name]['uncached_over_cached_cpu_seconds'])}"
        )
    report = {
        "benchmark": "prefix_cache",
        "model": args.model,
        "workloads": {
            "episode": {"episodes": args.episodes, "calls": args.calls},
            "group": {"size": args.group_size, "waves": args.waves},
        },
        "new_tokens": args.new_tokens,
        "cache_mib": args.cache_mib,
        "repeats": args.repeats,
        "machine": machine_record(load_before),
        "results": rows,
        "ratios": ratios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}  (load average before {load_before}, after {loadavg()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
