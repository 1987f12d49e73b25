"""Does a bfloat16 model learn as a float32 one does, and how much sooner does it get there? SmolLM2-135M on
arithmetic, the same runs in both dtypes, paired by seed.

The engine trains a half-precision model through float32 master weights and recomputes the old policy's
log-probs (`training.old_logprobs: auto`; docs/engine.md, "Precision"). On this CPU bfloat16 ran the model's
forward and backward 1.7x and greedy decoding 1.8x faster than float32 (docs/benchmarks/cpu_precision.md);
that is a lever only if what is trained is as good. Each seed runs the learning benchmark's job
(benchmarks/learning_arithmetic.py: 8 problems x 8 replies a step, 16 steps, held-out greedy accuracy on
100 problems before and after) once per dtype, the order alternating from seed to seed, every run whole
(no step-0 cache: each run measures its own untrained model and pays for it).

Reported: held-out accuracy before and after per dtype; the gain (after - before) of bfloat16 minus
float32 with a paired t 95% interval over seeds; the run's wall time and its training time (the server's
`train_time_s` summed over steps) in each dtype, and the speed-up of bfloat16 per seed as median
(min-max); the old-log-prob gap the bfloat16 runs recomputed away (`old_logp_gap`). Plot: held-out accuracy
over steps per seed and dtype.

    python benchmarks/precision_learning.py                  # 3 seeds x 2 dtypes; alone on a quiet machine
    python benchmarks/precision_learning.py --model tiny --seeds 0 1 --steps 1 --eval-size 2 --eval-every 0   # plumbing
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis.stats import paired_interval  # noqa: E402
from benchmarks.common import fmt_spread, loadavg, machine_record, spread, write_report  # noqa: E402
from engine.jobs import TrainJob  # noqa: E402
from engine.launch import train  # noqa: E402

DTYPES = ("float32", "bfloat16")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8, help="tasks per step (B)")
    ap.add_argument("--group", type=int, default=8, help="episodes per task (G)")
    ap.add_argument("--lr", type=float, default=1.5e-5)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--eval-size", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=4, help="0: before and after only")
    ap.add_argument("--out", default="docs/benchmarks/precision_learning", help="writes OUT.json, OUT.md, OUT.png")
    ap.add_argument("--runs", default="runs/precision_learning", help="run dirs (one per seed and dtype, replaced)")
    args = ap.parse_args(argv)
    if len(args.seeds) < 2:
        ap.error("give at least 2 seeds: the comparison is an interval over seeds")
    return args


def job_for(seed: int, dtype: str, args: argparse.Namespace) -> TrainJob:
    """benchmarks/learning_arithmetic.py's job, in `dtype`, measuring its own step 0."""
    return TrainJob(
        task="arithmetic", seed=seed, eval_size=args.eval_size, eval_every=args.eval_every,
        temperature=args.temperature, max_tokens=args.max_tokens, concurrency=args.batch * args.group,
        eval0_cache=False, keep_final_checkpoint=False,
        swarm={
            "model": {"name": args.model, "seed": seed, "dtype": dtype},
            "pool": {"policy": "task_count", "batch_size": args.batch, "group_size": args.group},
            "training": {"max_steps": args.steps, "lr": args.lr, "mini_batch_size": args.batch * args.group,
                         "micro_batch_size": min(8, args.batch * args.group), "checkpoint_every": 0},
        },
    )


def order(seed_index: int) -> tuple[str, ...]:
    """float32 first on even seeds, bfloat16 first on odd ones: neither dtype always runs on a warmer machine."""
    return DTYPES if seed_index % 2 == 0 else DTYPES[::-1]


def read_run(run_dir: Path, summary: dict, wall_s: float) -> dict[str, Any]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train_time_s" in r]
    evals = sorted({r["step"]: r["eval_accuracy"] for r in rows if "eval_accuracy" in r}.items())
    gap = [r["old_logp_gap"] for r in steps if "old_logp_gap" in r]
    return {
        "before": summary["accuracy_before"], "after": summary["accuracy_after"], "curve": evals,
        "train_reward": [r["reward_mean"] for r in steps], "wall_s": wall_s,
        "train_s": sum(r["train_time_s"] for r in steps), "steps": len(steps),
        "old_logp_gap_mean": statistics.fmean(gap) if gap else None,
    }


def summarise(runs: dict[str, dict[int, dict[str, Any]]], seeds: list[int]) -> dict[str, Any]:
    def col(dtype: str, key: str) -> list[float]:
        return [runs[dtype][s][key] for s in seeds]

    gain = {d: [a - b for a, b in zip(col(d, "after"), col(d, "before"), strict=True)] for d in DTYPES}
    diff = paired_interval(gain["bfloat16"], gain["float32"])
    out: dict[str, Any] = {
        "seeds": seeds,
        "by_dtype": {d: {"before_mean": statistics.fmean(col(d, "before")), "after_mean": statistics.fmean(col(d, "after")),
                         "gain_mean": statistics.fmean(gain[d]), "wall_s_median": statistics.median(col(d, "wall_s")),
                         "train_s_median": statistics.median(col(d, "train_s"))} for d in DTYPES},
        "gain_bf16_minus_fp32": {**diff.as_dict(), "half_width": (diff.hi - diff.lo) / 2 if diff.defined else None},
        "speedup_wall": spread([f / b for f, b in zip(col("float32", "wall_s"), col("bfloat16", "wall_s"), strict=True)]),
        "speedup_train": spread([f / b for f, b in zip(col("float32", "train_s"), col("bfloat16", "train_s"), strict=True)]),
    }
    gaps = [g for g in col("bfloat16", "old_logp_gap_mean") if g is not None]
    out["bf16_old_logp_gap_mean"] = statistics.fmean(gaps) if gaps else None
    return out


def page(result: dict[str, Any]) -> str:
    s, a = result["summary"], result["args"]
    d = s["gain_bf16_minus_fp32"]
    ci = f"[{d['lo']:+.3f}, {d['hi']:+.3f}]" if d["lo"] is not None else "no interval (identical differences)"
    lines = [
        "# bfloat16 against float32: learning and time, paired by seed (generated)", "",
        f"Command: `{result['command']}`", "",
        f"Model {a['model']} on arithmetic: {a['steps']} steps of {a['batch']} problems x {a['group']} replies, "
        f"held-out greedy accuracy on {a['eval_size']} problems; seeds {s['seeds']}, each in both dtypes.", "",
        "| dtype | before | after | gain | wall per run (median) | training per run (median) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for dt, v in s["by_dtype"].items():
        lines.append(f"| {dt} | {v['before_mean']:.3f} | {v['after_mean']:.3f} | {v['gain_mean']:+.3f} | "
                     f"{v['wall_s_median']:.0f} s | {v['train_s_median']:.0f} s |")
    lines += [
        "", "| seed | float32 before -> after | bfloat16 before -> after | wall fp32 / bf16 |", "| --- | --- | --- | --- |",
    ]
    for seed in s["seeds"]:
        f, b = result["runs"]["float32"][str(seed)], result["runs"]["bfloat16"][str(seed)]
        lines.append(f"| {seed} | {f['before']:.2f} -> {f['after']:.2f} | {b['before']:.2f} -> {b['after']:.2f} | "
                     f"{f['wall_s'] / b['wall_s']:.2f}x |")
    gap = s["bf16_old_logp_gap_mean"]
    lines += [
        "",
        f"Gain of bfloat16 minus float32: {d['mean']:+.3f}, paired t 95% {ci} over {d['n']} seeds.",
        f"Speed-up of bfloat16: wall {fmt_spread(s['speedup_wall'])}, training {fmt_spread(s['speedup_train'])} (median, min-max over seeds).",
        f"Old-log-prob gap the bfloat16 runs recomputed away: {gap:.4f} nats a token on average." if gap is not None else "",
        "", f"Machine: {result['machine']['platform']}, {result['machine']['cpu_count']} CPUs, torch {result['machine']['torch']}, "
        f"load before {result['machine']['loadavg_before']}, after {result['machine']['loadavg_after']}; wall {result['wall_s']:.0f} s.",
        "", "![held-out accuracy per seed and dtype](precision_learning.png)",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for dtype, style in zip(DTYPES, ("-", "--"), strict=True):
        for seed, run in result["runs"][dtype].items():
            xs, ys = zip(*run["curve"], strict=True)
            ax.plot(xs, ys, style, marker="o", label=f"{dtype} seed {seed}")
    ax.set(xlabel="training step", ylabel="held-out greedy accuracy", title=f"{result['args']['model']} on arithmetic")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    t0, load_before = time.time(), loadavg()
    runs: dict[str, dict[int, dict[str, Any]]] = {d: {} for d in DTYPES}
    for k, seed in enumerate(args.seeds):
        for dtype in order(k):
            run_dir = Path(args.runs) / f"seed{seed}-{dtype}"
            shutil.rmtree(run_dir, ignore_errors=True)  # a finished run dir would be reused, its time not measured
            t_run = time.time()
            summary = train(job_for(seed, dtype, args), run_dir)
            runs[dtype][seed] = read_run(run_dir, summary, time.time() - t_run)
            print(f"seed {seed} {dtype}: {runs[dtype][seed]['before']:.3f} -> {runs[dtype][seed]['after']:.3f} "
                  f"in {runs[dtype][seed]['wall_s']:.0f} s", flush=True)
    result = {
        "command": shlex.join(["python", "benchmarks/precision_learning.py", *(argv if argv is not None else sys.argv[1:])]),
        "args": vars(args), "summary": summarise(runs, args.seeds), "runs": runs,
        "machine": machine_record(load_before), "wall_s": time.time() - t0,
    }
    result = json.loads(json.dumps(result))  # seeds become strings, as the JSON holds them
    print(write_report(args.out, result, page, plot))
    return result


if __name__ == "__main__":
    main()
