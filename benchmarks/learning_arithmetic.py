"""Evidence of real learning: SmolLM2-135M on arithmetic, held-out greedy accuracy over training, several seeds.

Each seed is a full `engine.launch.train` run (a real swarm server subprocess + the arithmetic task client):
held-out greedy accuracy before training, every `--eval-every` steps, and after the fixed step budget.
The improvement is compared with the seed-to-seed spread; the learning curves are plotted.

    python benchmarks/learning_arithmetic.py --seeds 0 1 2 --steps 16 --out docs/benchmarks/learning_arithmetic
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import loadavg, machine_record  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.jobs import TrainJob  # noqa: E402
from engine.launch import train  # noqa: E402


def job_for(seed: int, args: argparse.Namespace) -> TrainJob:
    return TrainJob(
        task="arithmetic",
        seed=seed,
        eval_size=args.eval_size,
        eval_every=args.eval_every,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        concurrency=args.batch * args.group,
        swarm=SwarmConfig(
            model={"name": args.model, "seed": seed},
            pool={"policy": "task_count", "batch_size": args.batch, "group_size": args.group},
            training={
                "max_steps": args.steps, "lr": args.lr, "mini_batch_size": args.batch * args.group,
                "micro_batch_size": 8, "checkpoint_every": 0,
            },
        ),
    )


def curve(summary: dict) -> list[tuple[int, float]]:
    pts = [(0, summary["accuracy_before"])] + [(e["step"], e["accuracy"]) for e in summary["evals"]]
    return pts + [(summary["max_steps"], summary["accuracy_after"])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8, help="tasks per step (B)")
    ap.add_argument("--group", type=int, default=8, help="episodes per task (N)")
    ap.add_argument("--lr", type=float, default=1.5e-5)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--eval-size", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--out", default="docs/benchmarks/learning_arithmetic")
    ap.add_argument("--runs", default="runs/learning_arithmetic")
    args = ap.parse_args()

    load_before = loadavg()
    results = []
    for seed in args.seeds:
        t0 = time.time()
        summary = train(job_for(seed, args), Path(args.runs) / f"seed{seed}")
        lines = [json.loads(x) for x in (Path(args.runs) / f"seed{seed}" / "metrics.jsonl").read_text().splitlines()]
        rewards = [r["reward_mean"] for r in lines if "reward_mean" in r]
        results.append({"seed": seed, "curve": curve(summary), "train_reward": rewards, "wall_s": time.time() - t0})

    before = [r["curve"][0][1] for r in results]
    after = [r["curve"][-1][1] for r in results]
    gains = [a - b for a, b in zip(after, before, strict=True)]
    report = {
        "config": vars(args),
        "machine": machine_record(load_before),
        "runs": results,
        "before_mean": statistics.mean(before),
        "after_mean": statistics.mean(after),
        "gain_mean": statistics.mean(gains),
        "gain_min": min(gains),
        "after_spread": max(after) - min(after),
        "after_sd": statistics.stdev(after) if len(after) > 1 else 0.0,
    }
    Path(args.out + ".json").write_text(json.dumps(report, indent=2))

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        xs, ys = zip(*r["curve"], strict=True)
        ax1.plot(xs, ys, marker="o", label=f"seed {r['seed']}")
        ax2.plot(range(1, len(r["train_reward"]) + 1), r["train_reward"], label=f"seed {r['seed']}")
    ax1.set(xlabel="training step", ylabel="held-out greedy accuracy", title=f"{args.model} on arithmetic")
    ax2.set(xlabel="training step", ylabel="mean training reward (sampled)", title="training reward")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=120)
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
