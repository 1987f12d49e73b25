"""Where the engine's compute thread spends a sampling step: cProfile of `DecodeBatch.step`, as proportions.

The workload is A3R's default step (`--group-size 4`, 16 episodes: 4 arithmetic chat prompts each sent as 4
separate calls, temperature 1, at most 32 tokens, stopping at end of turn), driven through the real
`TorchInferenceEngine` on SmolLM2-135M. Only the compute thread is profiled (HTTP, the server and the
tokenizer's chat template are outside it). On a shared machine absolute seconds measure the neighbours too;
the proportions are what to compare.

    python benchmarks/sampling_profile.py --threads 1 --steps 2
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import loadavg, machine_record  # noqa: E402
from benchmarks.generation_throughput import make_prompts  # noqa: E402
from engine.backends.base import SamplingParams  # noqa: E402
from engine.backends.torch import TorchInferenceEngine  # noqa: E402
from engine.config import ModelConfig  # noqa: E402
from engine.models import load_model  # noqa: E402

# Profile entries (file suffix, function name) summed into each category (see `cumulative`); the model's
# other ops and the engine's own Python are what remains of the forward and of the step.
CATEGORIES = {
    "linear (matmul)": [("", "<built-in method torch._C._nn.linear>")],
    "attention (sdpa)": [("", "<built-in method torch._C._nn.scaled_dot_product_attention>")],
    "kv cache writes (update)": [("cache_utils.py", "update")],
    "sampling (sample_next)": [("sampling.py", "sample_next")],
    "row surgery (rows leave/join)": [("batch.py", "_keep"), ("kv.py", "concat_rows")],
}


def cumulative(stats: pstats.Stats, file_suffix: str, name: str) -> float:
    """A builtin's own time; a Python function's cumulative time. Where several functions match (Cache.update
    calls DynamicLayer.update, both `update` in cache_utils.py), the outermost one's: the largest."""
    times = [
        tt if name.startswith("<built-in") else ct
        for (file, _line, func), (_cc, _nc, tt, ct, _callers) in stats.stats.items()
        if func == name and file.endswith(file_suffix)
    ]
    return max(times, default=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: proportions least skewed by load)")
    ap.add_argument("--steps", type=int, default=2, help="sampling steps profiled (after one warm-up step)")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--out", type=Path, help="write the proportions as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load_model(ModelConfig(name=args.model), device="cpu")
    distinct = args.episodes // args.group_size
    prompts = make_prompts(loaded.tokenizer, args.episodes * (args.steps + 1), args.group_size)
    engine = TorchInferenceEngine.from_loaded(loaded)
    profile = cProfile.Profile()
    step = engine._batch.step

    def profiled_step(*a, **k):
        profile.enable()
        try:
            return step(*a, **k)
        finally:
            profile.disable()

    async def one(k: int) -> None:
        batch = prompts[k * args.episodes : (k + 1) * args.episodes]
        params = [SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=k * 1000 + i) for i in range(len(batch))]
        await asyncio.gather(*[engine.generate(p, s) for p, s in zip(batch, params, strict=True)])

    load_before = loadavg()
    try:
        asyncio.run(one(args.steps))  # warm-up: first-call allocations, not profiled
        engine.stats.reset()
        engine._batch.step = profiled_step
        for k in range(args.steps):
            asyncio.run(one(k))
    finally:
        engine.close()
    stats = pstats.Stats(profile)
    total = cumulative(stats, "batch.py", "step")
    parts = {c: sum(cumulative(stats, f, n) for f, n in entries) for c, entries in CATEGORIES.items()}
    forward = cumulative(stats, "batch.py", "_forward")
    model_ops = forward - parts["linear (matmul)"] - parts["attention (sdpa)"] - parts["kv cache writes (update)"]
    parts["other model ops (rope, norms, activations, masks)"] = model_ops
    parts["engine bookkeeping (python, prefill inputs, stops)"] = total - forward - parts["sampling (sample_next)"] - parts[
        "row surgery (rows leave/join)"
    ]
    print(f"compute thread: {total:.1f} s over {args.steps} steps ({engine.stats.decode_passes} decode passes, "
          f"{engine.stats.tokens_generated} tokens), {args.threads} thread(s), load {loadavg()[0]:.1f}")
    for c, s in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * s / total:5.1f}%  {c}")
    # Across the categories above: the prompts' prefill (its forward, sampling and row expansion).
    prefill = cumulative(stats, "batch.py", "_prefill")
    print(f"  of all that, the prefill of the step's prompts: {100 * prefill / total:.1f}%")
    if args.out:
        report = {
            "benchmark": "sampling_profile",
            "args": vars(args) | {"out": str(args.out)},
            "machine": machine_record(load_before),
            "distinct_prompts_per_step": distinct,
            "compute_thread_s": total,
            "proportions": {c: s / total for c, s in parts.items()},
            "prefill_share": prefill / total,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
