"""What the held-out set's size costs and buys: run-to-run sd of a run's score against evaluation seconds,
for held-out sets of 64, 128 and 256 items, on A3R's default run (issue 25, Deliver 3).

Each seed runs A3R's default job (`benchmarks/run_cost.py`'s "default" shape: SmolLM2-135M, arithmetic,
the leader's default steps) once, evaluated on the largest held-out set. The engine records every
evaluation's per-item scores (`eval_scores.jsonl`), and a held-out set of n items is the first n items of
the larger one (`engine.tasks.base.split_items` draws it as a prefix of its seed's stream), so one run per
seed gives its score at every size: the sizes are compared on the same runs, not on different ones.
(The training items skip the held-out ones, so a larger set can change a training problem or two: rare
on arithmetic's ~30k problems, and noise of the same kind as the seed's.)

For each size it reports, over seeds:
- the sd of the final score and of the gain (final - step 0), with 95% chi-square intervals (n - 1 df);
- the evaluation seconds per run, from the cost model the leader plans with (`a3r.leader.costs`, fitted
  on a quiet machine by `benchmarks/run_cost.py`), and the run's total;
- the seeds per arm a two-arm comparison needs for 80% power at `--effect` (the verdict's Welch rule,
  `a3r.analysis.stats.seeds_for_effect`), and so the seconds one answer costs: 2 arms x seeds x run.
The size with the cheapest answer is the better default; the intervals say how sure that is.

    .venv/bin/python benchmarks/heldout_size.py --seeds 0 1 2 3 4 5 --slots 2 --out docs/benchmarks/heldout_size

Runs go `--slots` at once, each in a child process with cores // slots threads, as `goal_sweep.py` runs
them (default: the slots A3R's `local_host()` gives this host). An interrupted measurement resumes by
running the same command (finished runs are kept under --runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis import fmt  # noqa: E402
from a3r.analysis.stats import seeds_for_effect  # noqa: E402
from a3r.leader.costs import run_seconds  # noqa: E402
from benchmarks.common import host_slots, loadavg, machine_record  # noqa: E402
from benchmarks.goal_sweep import PlannedRun, execute_all, run_threads  # noqa: E402
from benchmarks.paired_seeds import sd_interval  # noqa: E402
from benchmarks.run_cost import build_job  # noqa: E402
from engine.training.metrics import read_eval_scores  # noqa: E402

KEY = "eval_accuracy"


def planned(seeds: list[int], items: int, sets: list[str], runs_root: Path) -> list[PlannedRun]:
    """One default-shape run per seed, evaluated on `items` held-out items."""
    return [
        PlannedRun(items, s, "default run", build_job("default", [*sets, f"eval_size={items}", f"seed={s}"]), runs_root / f"seed{s}")
        for s in seeds
    ]


def prefix_scores(run_dir: Path, sizes: list[int]) -> dict[int, tuple[float, float]]:
    """size -> (step-0 accuracy, final accuracy) on the first `size` held-out items of a finished run."""
    evals = {step: scores for (step, key), (_ids, scores) in read_eval_scores(run_dir).items() if key == KEY}
    if len(evals) < 2:
        raise SystemExit(f"{run_dir} has no before/after per-item scores (run it with this tree's engine)")
    before, after = evals[min(evals)], evals[max(evals)]
    return {n: (float(np.mean(before[:n])), float(np.mean(after[:n]))) for n in sizes}


def size_row(n: int, before: list[float], final: list[float], job: dict[str, Any], effect: float) -> dict[str, Any]:
    """The spread and the cost of a held-out set of n items, over the seeds' (before, final) scores."""
    k = len(final)
    gain = np.asarray(final) - np.asarray(before)
    row: dict[str, Any] = {"items": n, "seeds": k, "mean_final": float(np.mean(final)), "mean_gain": float(gain.mean())}
    for name, values in (("final", np.asarray(final)), ("gain", gain)):
        sd = float(np.std(values, ddof=1))
        row[f"sd_{name}"], row[f"sd_{name}_ci"] = sd, sd_interval(sd, k - 1) if sd > 0 else (0.0, 0.0)
    sized = {**job, "eval_size": n}
    steps = int(job["swarm"]["training"]["max_steps"])
    run_s, no_eval_s = run_seconds(sized, steps), run_seconds({**job, "eval_size": 0}, steps)
    row["run_s"], row["eval_s"] = run_s, (run_s - no_eval_s) if run_s is not None else None
    sd = row["sd_gain"]
    row["seeds_per_arm"] = seeds_for_effect(sd, effect) if sd > 0 else 2
    row["answer_s"] = 2 * row["seeds_per_arm"] * run_s if run_s is not None else None
    return row


def analyse(scores: list[dict[int, tuple[float, float]]], sizes: list[int], job: dict[str, Any], effect: float):
    return [
        size_row(n, [s[n][0] for s in scores], [s[n][1] for s in scores], job, effect) for n in sizes
    ]


def markdown(result: dict[str, Any]) -> str:
    rows, m = result["rows"], result["machine"]
    best = min(rows, key=lambda r: r["answer_s"])
    lines = [
        "# What the held-out set's size costs and buys",
        "",
        f"A3R's default run ({result['model']}, arithmetic, {result['steps']} steps), seeds {result['seeds']}, each "
        f"evaluated on {result['items']} held-out items before and after training; a set of n items is the "
        "first n of them (the engine draws held-out sets as prefixes of one stream), so every size is read "
        "from the same runs.",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"Machine: {m['platform']}, {m['cpu_count']} CPUs, torch {m['torch']}, commit "
        f"`{m['git_commit'][:12]}`{' (dirty)' if m['git_dirty'] else ''}; load average "
        f"{result['load_before'][0]:.2f} before, {result['load_after'][0]:.2f} after. The sds are not timings, "
        "so load does not move them; the seconds are the leader's cost model (`a3r.leader.costs`, fitted on a "
        "quiet machine by `benchmarks/run_cost.py`), not timed here.",
        "",
        f"| held-out items | sd of final score [95%] | sd of gain [95%] | eval s per run | run s | seeds per arm "
        f"(80% power, effect {result['effect']:g}) | s per answer (2 arms) |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['items']} | {fmt(r['sd_final'])} [{fmt(r['sd_final_ci'][0])}, {fmt(r['sd_final_ci'][1])}] "
            f"| {fmt(r['sd_gain'])} [{fmt(r['sd_gain_ci'][0])}, {fmt(r['sd_gain_ci'][1])}] "
            f"| {r['eval_s']:.0f} | {r['run_s']:.0f} | {r['seeds_per_arm']} | {r['answer_s']:.0f} |"
        )
    lines += [
        "",
        f"**Cheapest answer: {best['items']} items** ({best['answer_s']:.0f} s for a two-arm comparison at effect "
        f"{result['effect']:g}). With {len(result['seeds'])} seeds an sd is known to within the chi-square "
        "intervals above; the sizes share their runs, so the ordering between them is firmer than each "
        "interval alone suggests, but a difference inside the intervals is not a finding.",
        "",
        f"![sd and cost by held-out size]({result['plot']})",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    xs = [r["items"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name, color in (("final", "tab:blue"), ("gain", "tab:orange")):
        sd = [r[f"sd_{name}"] for r in rows]
        lo = [r[f"sd_{name}"] - r[f"sd_{name}_ci"][0] for r in rows]
        hi = [r[f"sd_{name}_ci"][1] - r[f"sd_{name}"] for r in rows]
        a.errorbar(xs, sd, yerr=[lo, hi], marker="o", capsize=4, color=color, label=f"sd of {name} score")
    a.set(xscale="log", xticks=xs, xticklabels=[str(x) for x in xs], xlabel="held-out items",
          ylabel="run-to-run sd (95% interval)", title="What a larger held-out set buys")
    a.legend()
    b.bar([str(x) for x in xs], [r["answer_s"] / 60 for r in rows], color="tab:green")
    b.set(xlabel="held-out items", ylabel="minutes per two-arm answer",
          title=f"What it costs (80% power, effect {result['effect']:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(6)))
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--effect", type=float, default=0.1, help="effect a comparison must detect (accuracy)")
    p.add_argument("--set", dest="settings", action="append", default=[], help="KEY=VALUE on the job")
    p.add_argument("--runs", type=Path, default=Path("runs/heldout_size"))
    p.add_argument("--out", type=Path, default=None, help="write <out>.json, <out>.md and <out>.png")
    p.add_argument(
        "--slots", type=int, default=None, help="runs at once, cores // SLOTS threads each (as goal_sweep.py)"
    )
    args = p.parse_args(argv)
    if len(args.seeds) < 3:
        p.error("at least 3 seeds: an sd from 2 runs says next to nothing")
    sizes = sorted(set(args.sizes))
    load_before = loadavg()
    runs = planned(args.seeds, sizes[-1], args.settings, args.runs)
    slots, threads = host_slots(args.slots)
    execute_all(runs, slots, threads)
    job = runs[0].job
    result = {
        "command": "python benchmarks/heldout_size.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "seeds": args.seeds,
        "items": sizes[-1],
        "steps": job["swarm"]["training"]["max_steps"],
        "model": job["swarm"]["model"]["name"],
        "effect": args.effect,
        "machine": machine_record(),
        "load_before": load_before,
        "load_after": loadavg(),
        "slots": slots,
        "threads": {r.seed: run_threads(r) for r in runs},  # a thread count changes speed, not the scores
        "per_seed": {r.seed: prefix_scores(r.run_dir, sizes) for r in runs},
    }
    result["rows"] = analyse(list(result["per_seed"].values()), sizes, job, args.effect)
    for r in result["rows"]:
        print(json.dumps(r))
    if args.out is not None:
        result["plot"] = args.out.with_suffix(".png").name
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2))
        args.out.with_suffix(".md").write_text(markdown(result))
        plot(result, args.out.with_suffix(".png"))
    return result


if __name__ == "__main__":
    main()
