"""Who is the spy on SmolLM2-135M through vibe: the offline game template, checked, trained, reward curves.

What a new user does with the spy prompt and no LLM endpoint, minus tmux: `vibe new` picks the `game`
template (one shared model plays civilians and spies, each role its own GRPO groups), `vibe check` must
pass, then the same client process `vibe train` runs in its tmux window (`vibe.trainer.train`) trains
`--steps` steps, optionally after a supervised warm start on the gold descriptions (`--warm-start N`).
Per step the trainer writes the reward and its components (win, and the description score the probes
test) to rewards.jsonl; this script plots them with their spread over the step's episodes.

    .venv/bin/python benchmarks/spy_game.py --steps 10 --out docs/benchmarks/spy_game

One run, one seed: a curve to watch training move, not a comparison (no claim that one setting beats
another is made from it). The committed run, and what it shows: docs/benchmarks/spy_game.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
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
from vibe.check import check  # noqa: E402
from vibe.data import write_data  # noqa: E402
from vibe.layout import ClientDir  # noqa: E402
from vibe.progress import read_rewards  # noqa: E402
from vibe.templates import Family, copy_template  # noqa: E402
from vibe.trainer import train  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warm-start", type=int, default=0, help="supervised steps on the gold descriptions first")
    ap.add_argument("--client", default="runs/spy_game/client", help="where the client folder is written (fresh)")
    ap.add_argument("--out", default="docs/benchmarks/spy_game", help="writes OUT.json, OUT.md and OUT.png")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue a stopped run in --client from its last checkpoint (no new client, no second check)",
    )
    args = ap.parse_args()
    root, out = Path(args.client), Path(args.out)
    load_before = loadavg()
    check_s = None
    if args.resume:
        if not (root / ".vibe" / "check.json").exists():
            raise SystemExit(f"nothing to resume in {root}: run without --resume first")
        print((root / ".vibe" / "check.txt").read_text(), flush=True)  # the check the run passed
    else:
        shutil.rmtree(root, ignore_errors=True)
        copy_template(Family.GAME, root)
        write_data(ClientDir.open(root))
        t0 = time.time()
        report = check(root)
        print(report.render(), flush=True)
        if not report.passed:
            raise SystemExit("vibe check does not pass on the game template; nothing to train")
        check_s = time.time() - t0
    run_dir = root / ".vibe" / "train"
    run_dir.mkdir(parents=True, exist_ok=True)
    t1 = time.time()
    train(root, run_dir, args.steps, args.warm_start)
    train_s = time.time() - t1
    rewards = read_rewards(run_dir)
    result = {
        "command": shlex.join(["python", "benchmarks/spy_game.py", *sys.argv[1:]]),
        "machine": machine_record(load_before),
        "check_s": check_s,  # None when resumed (the first invocation ran the check)
        "resumed": args.resume,
        "train_s": train_s,
        "config": (root / "vibe.yaml").read_text(),
        "rewards": rewards,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    plot(rewards, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(markdown(result, out))
    print(f"wrote {out}.json, {out}.md, {out}.png")


def plot(rewards: list[dict], path: Path) -> None:
    steps = [r["step"] for r in rewards]
    fig, ax = plt.subplots(figsize=(7, 4))
    comps = sorted({k for r in rewards for k in r["components"]})
    for i, name in enumerate(comps):
        mean = [r["components"].get(name, {}).get("mean", float("nan")) for r in rewards]
        std = [r["components"].get(name, {}).get("std", float("nan")) for r in rewards]
        ax.plot(steps, mean, marker="o", color=f"C{i}", label=name)
        ax.fill_between(steps, [m - s for m, s in zip(mean, std, strict=True)], [m + s for m, s in zip(mean, std, strict=True)], color=f"C{i}", alpha=0.12)
    ax.set(xlabel="training step", ylabel="reward (mean over the step's episodes, band: +- 1 sd)",
           title="Who is the spy, SmolLM2-135M, shared model (vibe game template)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(result: dict, out: Path) -> str:
    rows = ["| step | reward mean | sd | episodes | groups without variance |", "|---:|---:|---:|---:|---:|"]
    for r in result["rewards"]:
        rows.append(f"| {r['step']} | {r['reward_mean']:.3f} | {r['reward_std']:.3f} | {r['episodes']} | {r['flat_groups']}/{r['groups']} |")
    checked = "passed earlier" if result["check_s"] is None else f"{result['check_s']:.0f} s"
    resumed = " (the last invocation, resumed from a checkpoint)" if result["resumed"] else ""
    return "\n".join([
        "# Who is the spy on SmolLM2-135M through vibe", "",
        f"Command: `{result['command']}`", "",
        f"Machine: {result['machine']['processor']}, {result['machine']['cpu_count']} cores, torch "
        f"{result['machine']['torch']}; vibe check {checked}, training {result['train_s'] / 60:.1f} min{resumed} "
        "(SmolLM2 plays every seat; one run, one seed).", "",
        "The offline `game` template as `vibe new` writes it (config below), checked by `vibe check`, then trained by "
        "the client process of `vibe train`.", "",
        *rows, "",
        f"![reward per step]({out.name}.png)", "",
        "```yaml", result["config"].rstrip(), "```", "",
    ])


if __name__ == "__main__":
    main()
