"""Generation throughput of TorchInferenceEngine: continuous batching vs sequential decoding.

For each concurrency C, C episodes call `generate` at once (one chat prompt each, sampled, fixed number
of new tokens) and we time until all finish. "batched" is the engine as the server runs it; "sequential"
is the same engine with max_batch_rows=1, i.e. one request decoded at a time: the unbatched baseline.
`--compare-linear` adds "batched-packed": the engine with oneDNN-prepacked linear weights (its opt-in
`packed_linear`; in results before 2026-12-01 14:00 UTC "batched" and "sequential" used the prepacked
weights and "batched-plain" was the plain engine).

    python benchmarks/generation_throughput.py --out results.json
    python benchmarks/generation_throughput.py --model tiny --concurrency 1 8 --new-tokens 16 --out runs/gen-smoke.json

`--baseline-commit REV` measures a code change instead: this tree ("current") against a git worktree of REV
("baseline"), each run in a child process whose PYTHONPATH is that tree, interleaved over the repeats, with
the ratio current/baseline of tok/s per repeat. A3R's default step is `--group-size 4`: 16 episodes are 4
prompts each sent as 4 separate calls (GRPO groups), at most 32 tokens, stopping at end of turn:

    python benchmarks/generation_throughput.py --concurrency 16 --group-size 4 --new-tokens 32 --stop-at-eos \
        --threads 2 --baseline-commit cbd0928 --repeats 5 --out runs/gen-sampling-speed.json

End-of-turn tokens are ignored by default (`--stop-at-eos` to honour them) so every episode produces
exactly --new-tokens tokens and runs compare equal work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    # A `--child` measures the tree on its PYTHONPATH (maybe a baseline commit's): this tree goes after it.
    sys.path.insert(len(sys.path) if "--child" in sys.argv else 0, str(REPO))

from benchmarks.common import fmt_spread, loadavg, machine_record, rotated, spread, timed_engine_run  # noqa: E402
from engine.backends.base import SamplingParams  # noqa: E402
from engine.backends.torch import TorchInferenceEngine  # noqa: E402
from engine.config import ModelConfig  # noqa: E402
from engine.models import load_model  # noqa: E402


def make_prompts(tokenizer, count: int, group_size: int = 1) -> list[list[int]]:
    """`count` short chat prompts (arithmetic questions), like the built-in tasks send: each of
    ceil(count / group_size) distinct prompts `group_size` times in a row, as a GRPO group's calls arrive."""
    distinct = _distinct_prompts(tokenizer, -(-count // group_size))
    return [p for p in distinct for _ in range(group_size)][:count]


def _distinct_prompts(tokenizer, count: int) -> list[list[int]]:
    out = []
    for i in range(count):
        a, b = 3 + 7 * i % 50, 11 + 13 * i % 40
        msg = [{"role": "user", "content": f"What is {a} + {b}? Explain your reasoning briefly."}]
        out.append(list(tokenizer.apply_chat_template(msg, add_generation_prompt=True, return_dict=False)))
    return out


async def _episodes(engine: TorchInferenceEngine, prompts: list[list[int]], new_tokens: int) -> int:
    params = [
        SamplingParams(max_new_tokens=new_tokens, temperature=1.0, top_p=1.0, seed=i)
        for i in range(len(prompts))
    ]
    results = await asyncio.gather(*[engine.generate(p, s) for p, s in zip(prompts, params, strict=True)])
    return sum(len(c.token_ids) for choices in results for c in choices)


def measure(loaded, prompts, new_tokens: int, max_batch_rows: int, stop_ids, packed: bool = False) -> dict:
    engine = TorchInferenceEngine.from_loaded(
        loaded, max_batch_rows=max_batch_rows, stop_token_ids=stop_ids, packed_linear=packed
    )
    tokens, seconds, cpu = timed_engine_run(
        engine,
        lambda e: _episodes(e, prompts[:1], 4),  # warm-up: first-call allocations and kernel selection
        lambda e: _episodes(e, prompts, new_tokens),
    )
    return {
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 2),
        # CPU seconds of all our threads: on a shared machine wall time measures the neighbours too,
        # CPU time mostly does not (with --threads 1; OpenMP spin-waits inflate it with more threads).
        "cpu_seconds": round(cpu, 3),
        "tokens_per_cpu_s": round(tokens / cpu, 2),
        "forward_passes": engine.stats.forward_passes,
        "tokens_per_forward_pass": round(tokens / max(engine.stats.forward_passes, 1), 2),
        "max_rows": engine.stats.max_rows,
    }


def child(spec: dict) -> None:
    """One `measure` of the tree this process imported (its PYTHONPATH), printed as JSON."""
    torch.set_num_threads(spec["threads"])
    loaded = load_model(ModelConfig(name=spec["model"]), device="cpu")
    prompts = make_prompts(loaded.tokenizer, spec["concurrency"], spec["group_size"])
    r = measure(loaded, prompts, spec["new_tokens"], 64, spec["stop_ids"])
    import engine

    r["engine"] = str(Path(engine.__file__).resolve().parents[1])
    print(json.dumps(r))


def measure_tree(tree: Path, args: argparse.Namespace, concurrency: int, stop_ids) -> dict:
    """`measure` in a child process whose PYTHONPATH is `tree`; checks that it imported that tree."""
    spec = {
        "model": args.model,
        "concurrency": concurrency,
        "group_size": args.group_size,
        "new_tokens": args.new_tokens,
        "stop_ids": stop_ids,
        "threads": args.threads or torch.get_num_threads(),
    }
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        env=env, check=True, capture_output=True, text=True,
    ).stdout
    r = json.loads(out.strip().splitlines()[-1])
    if Path(r["engine"]) != tree.resolve():
        raise SystemExit(f"the child imported {r['engine']}, not {tree}")
    return r


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", default="smollm2-135m", help="model name as in ModelConfig (default smollm2-135m)"
    )
    ap.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8, 32], help="concurrent episodes per run"
    )
    ap.add_argument("--new-tokens", type=int, default=64, help="new tokens per episode")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)"
    )
    ap.add_argument("--no-sequential", action="store_true", help="skip the unbatched baseline")
    ap.add_argument(
        "--compare-linear",
        action="store_true",
        help="also run batched with oneDNN-prepacked linear weights: mode batched-packed",
    )
    ap.add_argument("--stop-at-eos", action="store_true", help="stop episodes at end-of-turn tokens")
    ap.add_argument(
        "--group-size", type=int, default=1, help="calls per distinct prompt (a GRPO group; default 1: all distinct)"
    )
    ap.add_argument(
        "--baseline-commit",
        metavar="REV",
        help="compare this tree (mode current) with a git worktree of REV (mode baseline), batched, each in a "
        "child process; replaces the batched/sequential modes",
    )
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of every mode and concurrency")
    ap.add_argument("--out", type=Path, required=True, help="write the results as JSON here")
    args = ap.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.baseline_commit:
        return compare_trees(args, None if args.stop_at_eos else [])
    t0 = time.perf_counter()
    loaded = load_model(ModelConfig(name=args.model), device="cpu")
    load_s = time.perf_counter() - t0
    stop_ids = None if args.stop_at_eos else []
    prompts = make_prompts(loaded.tokenizer, max(args.concurrency), args.group_size)
    modes = [("batched", 64, False)] + ([] if args.no_sequential else [("sequential", 1, False)])
    if args.compare_linear:
        modes.append(("batched-packed", 64, True))

    load_before = loadavg()  # other jobs on a shared machine skew CPU figures: record them
    rows = []
    for rep in range(args.repeats):  # interleaved: the mode order rotates, so no mode always runs first
        for c in args.concurrency:
            for mode, max_rows, packed in rotated(modes, rep):
                r = measure(loaded, prompts[:c], args.new_tokens, max_rows, stop_ids, packed)
                r.update(concurrency=c, mode=mode, repeat=rep)
                rows.append(r)
                print(
                    f"  rep {rep} C={c:<3} {mode:<13} {r['tokens_per_s']:8.1f} tok/s  {r['tokens_per_cpu_s']:8.1f} "
                    f"tok/cpu-s  ({r['tokens']} tokens, {r['seconds']} s, load {loadavg()[0]:.1f})",
                    file=sys.stderr,
                )

    def speedups(baseline: str, mode: str = "batched") -> dict[str, dict]:
        """`mode` tok/s over `baseline` tok/s, per concurrency, one ratio per repeat: median and spread."""
        out = {}
        for c in args.concurrency:
            per = []
            for rep in range(args.repeats):
                by_mode = {r["mode"]: r for r in rows if r["concurrency"] == c and r["repeat"] == rep}
                if baseline in by_mode and mode in by_mode:
                    per.append(by_mode[mode]["tokens_per_s"] / by_mode[baseline]["tokens_per_s"])
            if per:
                out[str(c)] = spread(per)
        return out

    def median_of(c: int, mode: str, key: str) -> float | None:
        vals = [r[key] for r in rows if r["concurrency"] == c and r["mode"] == mode]
        return statistics.median(vals) if vals else None

    ratios = speedups("sequential")
    packed_ratios = speedups("batched", mode="batched-packed")
    if packed_ratios:
        print(f"\nbatched tok/s, oneDNN-prepacked over plain F.linear: { {c: fmt_spread(v) for c, v in packed_ratios.items()} }")

    print(
        f"\nmodel={args.model} new_tokens={args.new_tokens} torch_threads={torch.get_num_threads()} cpus={os.cpu_count()}"
        f" repeats={args.repeats} (medians; ratio: median (min-max) of the per-repeat ratios)"
    )
    head = ["episodes", "batched tok/s", "sequential tok/s", "ratio", "batched tok/cpu-s", "seq tok/cpu-s"]
    print(" | ".join(head))
    print("-" * len(" | ".join(head)))
    for c in args.concurrency:
        seq = median_of(c, "sequential", "tokens_per_s")
        seq_cpu = median_of(c, "sequential", "tokens_per_cpu_s")
        cells = [
            str(c),
            f"{median_of(c, 'batched', 'tokens_per_s'):.1f}",
            f"{seq:.1f}" if seq else "-",
            fmt_spread(ratios[str(c)]) if str(c) in ratios else "-",
            f"{median_of(c, 'batched', 'tokens_per_cpu_s'):.1f}",
            f"{seq_cpu:.1f}" if seq_cpu else "-",
        ]
        print(" | ".join(cell.rjust(len(h)) for cell, h in zip(cells, head, strict=True)))

    report = {
        "benchmark": "generation_throughput",
        "model": args.model,
        "new_tokens": args.new_tokens,
        "sampling": {"temperature": 1.0, "top_p": 1.0, "stop_at_eos": args.stop_at_eos},
        "machine": machine_record(load_before),
        "repeats": args.repeats,
        "model_load_s": round(load_s, 2),
        "results": rows,
        "batched_over_sequential": ratios,
        "packed_over_plain_linear": packed_ratios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


def compare_trees(args: argparse.Namespace, stop_ids) -> int:
    """`--baseline-commit`: this tree against REV's, each repeat both in rotated order; ratio per repeat."""
    from benchmarks.common import worktree_at

    load_before = loadavg()
    rows = []
    with worktree_at(args.baseline_commit) as base:
        trees = [("current", REPO), ("baseline", base)]
        for rep in range(args.repeats):
            for c in args.concurrency:
                for mode, tree in rotated(trees, rep):
                    r = measure_tree(tree, args, c, stop_ids)
                    r.update(concurrency=c, mode=mode, repeat=rep, load_after=loadavg())
                    rows.append(r)
                    print(
                        f"  rep {rep} C={c:<3} {mode:<9} {r['tokens_per_s']:8.1f} tok/s  {r['tokens_per_cpu_s']:8.1f} "
                        f"tok/cpu-s  ({r['tokens']} tokens, {r['forward_passes']} passes, {r['seconds']} s, "
                        f"load {r['load_after'][0]:.1f})",
                        file=sys.stderr,
                    )
    ratios = {}
    for c in args.concurrency:
        for key in ("tokens_per_s", "tokens_per_cpu_s"):
            per = []
            for rep in range(args.repeats):
                by = {r["mode"]: r for r in rows if r["concurrency"] == c and r["repeat"] == rep}
                # Seeded sampling is exact across the two trees, so both did the same tokens' work.
                if by["current"]["tokens"] != by["baseline"]["tokens"]:
                    print(f"  warning: rep {rep} C={c}: the trees generated different token counts", file=sys.stderr)
                per.append(by["current"][key] / by["baseline"][key])
            ratios.setdefault(str(c), {})[key] = spread(per)
            print(f"C={c} current/baseline {key}: {fmt_spread(ratios[str(c)][key])}")
    report = {
        "benchmark": "generation_throughput",
        "model": args.model,
        "new_tokens": args.new_tokens,
        "group_size": args.group_size,
        "baseline_commit": args.baseline_commit,
        "sampling": {"temperature": 1.0, "top_p": 1.0, "stop_at_eos": args.stop_at_eos},
        "machine": machine_record(load_before),
        "repeats": args.repeats,
        "results": rows,
        "current_over_baseline": ratios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
