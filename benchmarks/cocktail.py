"""Cocktail against specialists: does one model trained on a task mix come close to one specialist per task
given the same total episodes (the swarm paper's claim)?

Per seed, for the tasks in `--tasks` (default arithmetic, countdown and the multi-turn calculator agent):
- cocktail: one `swarm train` job with `mix: {task: 1/K}` (K tasks), K * S steps of B tasks x G episodes,
  every batch B/K tasks of each task (the server's per-client throttle holds the mix);
- specialists: one job per task, S steps of B tasks x G episodes of that task alone.

Fairness rule: the same episodes per task, hence the same total. Each task gets S * B * G episodes in both
arms (the cocktail's K * S steps of B/K per task, a specialist's S steps of B), so the cocktail's total,
K * S * B * G, is the specialists' total together, and the compute (optimizer steps, sampled tokens) is the
same on both sides. Every other setting (B, G, lr, mini-batches, sampling) is identical, so the cocktail
and a specialist differ only in what shares the batch: what the mix costs or gains per task. The other
reading ("each specialist gets as many episodes as the whole cocktail") would give each specialist K times
the cocktail's exposure to its task and measure mostly that; it is not this benchmark.

Pairing: seed k is `TrainJob.seed` and `swarm.model.seed` in every arm, and a cocktail's share of a task
draws from the same per-task stream as its specialist (engine.jobs: `split_items(task, ..., job.seed)`),
so both arms train on the same problems of each task in the same order; the JSON checks and records it.
Held-out items: the engine's held-out set (`eval_seed`, the same for every run and seed), never trained on:
`split_items` skips them in every training stream, and the JSON records the overlap found (0).

Reported per task: the held-out greedy accuracy after training of each arm, with 95% t intervals over
seeds; the untrained accuracy (step 0); and cocktail minus specialist, paired by seed (a3r.analysis.stats).
Finished run dirs are reused (`--runs`, default runs/<name of --out>); a run dir written with other
settings is refused. `--dry-run` lists the runs and the cost model's CPU estimate (a3r.leader.costs).

    python benchmarks/cocktail.py --dry-run     # the default: SmolLM2-135M, 4 seeds x (1 cocktail + 3 specialists)
    python benchmarks/cocktail.py               # writes docs/benchmarks/cocktail.{json,md,png}
    python benchmarks/cocktail.py --smoke --out /tmp/cocktail --runs /tmp/cocktail-runs   # tiny, seconds a run
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import engine.jobs as jobs  # noqa: E402
from a3r.analysis.stats import paired_interval, t_interval  # noqa: E402
from a3r.leader.costs import run_seconds  # noqa: E402
from benchmarks.common import loadavg, machine_record, write_report  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.tasks import get_task  # noqa: E402
from engine.tasks.base import split_items  # noqa: E402
from engine.training.metrics import read_run_metrics  # noqa: E402

DEFAULT_TASKS = ("arithmetic", "countdown", "calculator")
COCKTAIL, SPECIALIST = "cocktail", "specialist"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    ap.add_argument("--seeds", type=int, default=4, help="seeds 0..n-1 (at least 2: the intervals are over seeds)")
    ap.add_argument("--steps", type=int, default=8, help="S: each specialist's steps; the cocktail takes K * S")
    ap.add_argument("--batch", type=int, default=6, help="B: tasks per step in every arm, a multiple of K")
    ap.add_argument("--group", type=int, default=8, help="G: episodes per task (the GRPO group)")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=32, help="per call: a tool call or an expression needs ~25")
    ap.add_argument("--eval-size", type=int, default=64, help="held-out items per task")
    ap.add_argument("--smoke", action="store_true", help="tiny model, 2 seeds, 1 specialist step, B=K, G=2, 2 held-out items")
    ap.add_argument("--dry-run", action="store_true", help="list the runs and their expected CPU time; run nothing")
    ap.add_argument("--out", default="docs/benchmarks/cocktail", help="writes OUT.json, OUT.md, OUT.png")
    ap.add_argument("--runs", default=None, help="run dirs (default runs/<name of --out>); finished ones are reused")
    args = ap.parse_args(argv)
    if args.smoke:
        args.model, args.seeds, args.steps, args.batch, args.group = "tiny", 2, 1, len(args.tasks), 2
        args.eval_size, args.max_tokens, args.lr = 2, 4, 1e-3
    if args.seeds < 2:
        ap.error("--seeds must be at least 2: the intervals are over seeds")
    if len(set(args.tasks)) != len(args.tasks) or len(args.tasks) < 2:
        ap.error(f"--tasks needs at least two distinct tasks, got {args.tasks}")
    if args.batch % len(args.tasks):
        ap.error(f"--batch ({args.batch}) must be a multiple of the {len(args.tasks)} tasks: every batch holds each equally")
    args.runs = args.runs or str(Path("runs") / Path(args.out).name)
    return args


def train_job(args: argparse.Namespace, seed: int, task: str | None) -> jobs.TrainJob:
    """The cocktail's job (`task` None: the mix of all tasks, K * S steps) or `task`'s specialist (S steps)."""
    k = len(args.tasks)
    top: dict[str, Any] = {"mix": {t: 1.0 / k for t in args.tasks}} if task is None else {"task": task}
    small = args.model == "tiny"
    return jobs.TrainJob.model_validate({
        **top,
        "seed": seed,
        "eval_size": args.eval_size,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "concurrency": args.batch * args.group,  # a whole step in flight: the server batches it
        "keep_final_checkpoint": False,  # 1.6 GB per SmolLM2 run otherwise; the metrics are what is kept
        "swarm": SwarmConfig(
            model={"name": args.model, "seed": seed},
            pool={"policy": "task_count", "batch_size": args.batch, "group_size": args.group},
            training={
                "max_steps": args.steps * (k if task is None else 1), "lr": args.lr, "checkpoint_every": 0,
                **({"mini_batch_size": 4, "micro_batch_size": 2} if small else {}),
            },
        ),
    })


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every run: arm, task (None for the cocktail), seed, run dir and job, seed by seed."""
    runs = []
    for seed in range(args.seeds):
        for task in (None, *args.tasks):
            name = COCKTAIL if task is None else f"{SPECIALIST}-{task}"
            runs.append({"arm": COCKTAIL if task is None else SPECIALIST, "task": task, "seed": seed,
                         "run_dir": Path(args.runs) / name / f"seed{seed}", "job": train_job(args, seed, task)})
    return runs


def expected_seconds(job: jobs.TrainJob) -> float | None:
    """The cost model's wall seconds for `job` (a3r.leader.costs). A mix evaluates `eval_size` items per
    task, so it is priced with that many items; a multi-turn task's extra calls are not priced (see page)."""
    d = job.model_dump(mode="json")
    d["eval_size"] = job.eval_size * max(1, len(job.mix))
    return run_seconds(d, job.swarm.training.max_steps)


def training_items(job: jobs.TrainJob) -> dict[str, list[str]]:
    """Per task, the ids of the problems `job` trains on, in order, exactly as engine.jobs draws them."""
    steps = job.swarm.training.max_steps
    out = {}
    for t, n in job.tasks_per_batch().items():
        task = get_task(t)
        train, _ = split_items(task, jobs.items_per_batch(task, n) * steps, job.eval_size, job.seed, job.eval_seed)
        out[t] = [it.id for it in train]
    return out


def split_check(runs: list[dict[str, Any]], tasks: list[str]) -> dict[str, Any]:
    """Per task: training problems found in the held-out set (0 by construction), and whether the cocktail
    and the specialist of every seed train on the same problems in the same order (the pairing)."""
    held = {t: {it.id for it in split_items(get_task(t), 0, runs[0]["job"].eval_size, 0, runs[0]["job"].eval_seed)[1]}
            for t in tasks}
    items = {(r["arm"], r["seed"]): {} for r in runs}
    for r in runs:
        items[(r["arm"], r["seed"])].update(training_items(r["job"]))
    seeds = sorted({r["seed"] for r in runs})
    return {t: {
        "held_out_items": len(held[t]),
        "training_items_in_held_out": sum(len(set(items[(a, s)][t]) & held[t]) for a in (COCKTAIL, SPECIALIST) for s in seeds),
        "same_training_items_both_arms": all(items[(COCKTAIL, s)][t] == items[(SPECIALIST, s)][t] for s in seeds),
    } for t in tasks}


def settings_differ(run_dir: Path, job: jobs.TrainJob) -> list[str]:
    """The job fields in which `run_dir`'s recorded job (job.json) differs from `job`; [] when it has none."""
    path = run_dir / "job.json"
    if not path.exists():
        return []
    theirs, mine = json.loads(path.read_text()), job.model_dump(mode="json")
    return sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))


def state(run: dict[str, Any]) -> str:
    """'finished' (reused as it is), 'other settings' (refused) or 'to run' (new, or resumed)."""
    if settings_differ(run["run_dir"], run["job"]):
        return "other settings"
    return "finished" if (run["run_dir"] / "summary.json").exists() else "to run"


def check_run_dir(run_dir: Path, job: jobs.TrainJob) -> None:
    """Record `job` in `run_dir` (job.json), or refuse a run dir that an earlier run of other settings wrote:
    reusing it would report the other settings' result under this command."""
    diff = settings_differ(run_dir, job)
    if diff:
        raise SystemExit(f"{run_dir} was run with other settings (fields {diff}); pass another --runs")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.json").write_text(json.dumps(job.model_dump(mode="json"), indent=2))


def accuracies(rows: list[dict], job: jobs.TrainJob) -> dict[str, dict[str, float | None]]:
    """Per task of `job`: held-out accuracy before (step 0) and after (max_steps) from its metrics rows
    (`eval_accuracy/<task>` in a mix, `eval_accuracy` alone); the last row of a step wins, as in a resume."""
    last = job.swarm.training.max_steps
    out = {}
    for t in job.tasks_per_batch():
        key = f"eval_accuracy/{t}" if job.mix else "eval_accuracy"
        at = {int(r["step"]): float(r[key]) for r in rows if key in r and "step" in r}
        out[t] = {"before": at.get(0), "after": at.get(last)}
    return out


def execute(run: dict[str, Any]) -> dict[str, Any]:
    """Train one run (or reuse its finished run dir) and read its accuracies."""
    run_dir, job = run["run_dir"], run["job"]
    check_run_dir(run_dir, job)
    reused = state(run) == "finished"
    t0 = time.monotonic()
    jobs.train_single(job, run_dir)  # returns at once with the summary of a run dir that finished
    return {"arm": run["arm"], "task": run["task"], "seed": run["seed"], "run_dir": str(run_dir), "reused": reused,
            "wall_s": time.monotonic() - t0, "accuracy": accuracies(read_run_metrics(run_dir), job)}


def table(records: list[dict[str, Any]], tasks: list[str]) -> dict[str, dict[str, dict[int, float]]]:
    """task -> {cocktail: {seed: after}, specialist: {seed: after}, untrained: {seed: before}} (untrained
    from the specialist's step 0: the same weights and held-out items as the cocktail's)."""
    out: dict[str, dict[str, dict[int, float]]] = {t: {COCKTAIL: {}, SPECIALIST: {}, "untrained": {}} for t in tasks}
    for r in records:
        for t, acc in r["accuracy"].items():
            if acc["after"] is not None:
                out[t][r["arm"]][r["seed"]] = acc["after"]
            if r["arm"] == SPECIALIST and acc["before"] is not None:
                out[t]["untrained"][r["seed"]] = acc["before"]
    return out


def interval(values: list[float], paired_with: list[float] | None = None) -> dict[str, Any]:
    """A 95% t interval over seeds (of values - paired_with, seed by seed, when given), JSON-safe: lo/hi
    None when undefined (one seed, or identical values), with its half-width, the smallest effect the seeds
    could show."""
    iv = t_interval(values) if paired_with is None else paired_interval(values, paired_with)
    d = iv.as_dict()
    d["half_width"] = (iv.hi - iv.lo) / 2 if iv.defined else None
    return d


def summarise(tab: dict[str, dict[str, dict[int, float]]]) -> dict[str, dict[str, Any]]:
    """Per task: each arm's interval, the untrained mean, and cocktail - specialist over the seeds both
    arms finished (paired)."""
    out = {}
    for t, arms in tab.items():
        seeds = sorted(set(arms[COCKTAIL]) & set(arms[SPECIALIST]))
        c, s = [arms[COCKTAIL][k] for k in seeds], [arms[SPECIALIST][k] for k in seeds]
        u = list(arms["untrained"].values())
        out[t] = {
            "seeds": seeds,
            COCKTAIL: interval(c) if c else None,
            SPECIALIST: interval(s) if s else None,
            "untrained_mean": sum(u) / len(u) if u else None,
            "cocktail_minus_specialist": interval(c, s) if seeds else None,
        }
    return out


def _fmt(iv: dict | None, sign: str = "") -> str:
    if iv is None:
        return "n/a"
    if iv["half_width"] is None:
        return f"{iv['mean']:{sign}.3f} (n={iv['n']}, no interval: identical values)"
    return f"{iv['mean']:{sign}.3f} [{iv['lo']:{sign}.3f}, {iv['hi']:{sign}.3f}] (n={iv['n']}, ±{iv['half_width']:.3f})"


def _learned(iv: dict | None, untrained: float | None) -> bool | None:
    """Did an arm move above the untrained accuracy, by its interval (or, with identical values over seeds,
    by its value)? None when there is nothing to compare."""
    if iv is None or untrained is None:
        return None
    return (iv["lo"] if iv["half_width"] is not None else iv["mean"]) > untrained


def verdict(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One plain sentence per task, read from the intervals: did each arm learn the task at all, and is the
    cocktail shown behind, ahead of, or no different from the specialist, with the smallest gap the seeds
    could have shown."""
    out = []
    for t, row in summary.items():
        u = row["untrained_mean"]
        learned = {arm: _learned(row[arm], u) for arm in (SPECIALIST, COCKTAIL)}
        if not any(learned.values()):
            out.append(f"**{t}**: neither arm is shown above the untrained {u:.3f}: the task was not learned at this "
                       "scale, so it says nothing about the mix." if u is not None else f"**{t}**: no results.")
            continue
        who = " and ".join(f"the {arm}" for arm, ok in learned.items() if ok)
        d = row["cocktail_minus_specialist"]
        if d is None:
            gap = "no seed finished in both arms"
        elif d["half_width"] is None:
            gap = f"the two arms differ by {d['mean']:+.3f} in every seed (no interval)"
        elif d["hi"] < 0:
            gap = f"the cocktail is behind the specialist by {-d['mean']:.3f} [{-d['hi']:.3f}, {-d['lo']:.3f}]"
        elif d["lo"] > 0:
            gap = f"the cocktail is ahead of the specialist by {d['mean']:.3f} [{d['lo']:.3f}, {d['hi']:.3f}]"
        else:
            gap = (f"no difference is shown ({d['mean']:+.3f}, interval holds 0), but with n={d['n']} only a gap "
                   f"larger than {d['half_width']:.3f} could have shown")
        out.append(f"**{t}**: learned by {who} (above the untrained {u:.3f}); {gap}.")
    return out


def page(result: dict[str, Any]) -> str:
    """The benchmark page: question, command, settings, fairness rule, the table, the split checks."""
    a, s = result["args"], result["summary"]
    k = len(a["tasks"])
    lines = [
        "# Cocktail against specialists", "",
        "Does one model trained on a task mix come close to one specialist per task given the same total "
        "episodes? (the swarm paper's claim, at CPU scale)", "",
        f"Command: `{result['command']}`", "",
        f"Model {a['model']}; tasks {', '.join(a['tasks'])}; seeds 0-{a['seeds'] - 1}. Cocktail: {k * a['steps']} steps "
        f"of {a['batch']} tasks ({a['batch'] // k} of each) x {a['group']} episodes. Specialists: {a['steps']} step(s) of "
        f"{a['batch']} tasks x {a['group']} episodes of their own task. Every task gets {a['steps'] * a['batch'] * a['group']} "
        f"episodes in both arms (the same total, {k * a['steps'] * a['batch'] * a['group']}, on both sides). lr {a['lr']}, "
        f"temperature {a['temperature']}, max_tokens {a['max_tokens']} per call; {a['eval_size']} held-out items per "
        "task, greedy.", "",
        "Design. Fairness: the same episodes per task in both arms (hence the same total, optimizer steps and "
        "sampled tokens); B, G, lr, mini-batches and sampling are the same everywhere, so an arm differs only in "
        "what shares the batch. (The other reading, each specialist getting as many episodes as the whole "
        "cocktail, would mostly measure three times the exposure.) Pairing: seed k is the job's seed and the "
        "model's in every arm, and the engine draws each task's training problems from one per-task stream, so "
        "the cocktail and the specialist of a seed train on the same problems in the same order (checked below). "
        "Held-out items: the engine's per-task held-out set, removed from every training stream (counted below). "
        + ("`calculator` is multi-turn: up to 4 calls per episode, tool calls answered by a calculator. "
           if "calculator" in a["tasks"] else "")
        + "Resumable: a finished run under `--runs` is reused, a run dir of other settings refused.", "",
        "| task | untrained | specialist | cocktail | cocktail - specialist (paired by seed) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t, row in s.items():
        u = "n/a" if row["untrained_mean"] is None else f"{row['untrained_mean']:.3f}"
        lines.append(f"| {t} | {u} | {_fmt(row[SPECIALIST])} | {_fmt(row[COCKTAIL])} | {_fmt(row['cocktail_minus_specialist'], '+')} |")
    lines += [
        "", "Held-out accuracy after training, mean and 95% t interval over seeds (± its half-width: the smallest "
        "effect these seeds could show). A difference whose interval holds 0 is no difference at this scale.", "",
        "Result, task by task (read from the intervals):", "",
        *(f"- {line}" for line in verdict(s)), "",
        "Checks: " + "; ".join(
            f"{t}: {c['training_items_in_held_out']} training problems in its {c['held_out_items']} held-out items, "
            f"{'the same' if c['same_training_items_both_arms'] else 'NOT the same'} training problems in both arms"
            for t, c in result["split_check"].items()) + ".", "",
        f"Runs: {len(result['runs'])} ({sum(r['reused'] for r in result['runs'])} reused from earlier); the cost "
        f"model expected {result['expected_s']:.0f} s in all." if result["expected_s"] is not None else
        f"Runs: {len(result['runs'])} ({sum(r['reused'] for r in result['runs'])} reused from earlier).", "",
        f"Machine: {result['machine']['platform']}, {result['machine']['cpu_count']} CPUs, load before "
        f"{result['machine']['loadavg_before']}, after {result['machine']['loadavg_after']}; wall {result['wall_s']:.0f} s. "
        f"Plot: `{Path(result['out']).name}.png`.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Left: accuracy per task and arm (mean, 95% interval, each seed a dot). Right: cocktail - specialist."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks, s, tab = result["args"]["tasks"], result["summary"], result["table"]
    fig, (ax, dx) = plt.subplots(1, 2, figsize=(11, 4))
    for j, (arm, colour) in enumerate(((SPECIALIST, "tab:blue"), (COCKTAIL, "tab:orange"))):
        for i, t in enumerate(tasks):
            x = i + (j - 0.5) * 0.35
            iv = s[t][arm]
            if iv is None:
                continue
            err = [[iv["mean"] - iv["lo"]], [iv["hi"] - iv["mean"]]] if iv["half_width"] is not None else None
            ax.bar(x, iv["mean"], 0.35, yerr=err, color=colour, alpha=0.6, capsize=4, label=arm if i == 0 else None)
            ax.plot([x] * len(tab[t][arm]), list(tab[t][arm].values()), "k.", ms=4)
    for i, t in enumerate(tasks):
        if s[t]["untrained_mean"] is not None:
            ax.hlines(s[t]["untrained_mean"], i - 0.4, i + 0.4, colors="grey", linestyles="--",
                      label="untrained" if i == 0 else None)
        d = s[t]["cocktail_minus_specialist"]
        if d is not None:
            err = [[d["mean"] - d["lo"]], [d["hi"] - d["mean"]]] if d["half_width"] is not None else None
            dx.errorbar(i, d["mean"], yerr=err, fmt="o", capsize=5)
    ax.set(xticks=range(len(tasks)), xticklabels=tasks, ylabel="held-out accuracy", ylim=(0, 1),
           title="after training (95% t interval over seeds)")
    ax.legend(fontsize=8)
    dx.axhline(0, color="grey", lw=0.8)
    dx.set(xticks=range(len(tasks)), xticklabels=tasks, ylabel="cocktail - specialist", title="paired by seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def dry_run(runs: list[dict[str, Any]]) -> float | None:
    """Print every run, whether it is finished, and the cost model's seconds; returns the total to run."""
    total, unknown = 0.0, False
    for r in runs:
        est = expected_seconds(r["job"])
        done = state(r)
        steps = r["job"].swarm.training.max_steps
        cost = done if done != "to run" else "no cost prior" if est is None else f"~{est:.0f} s"
        print(f"{r['arm']:10} {r['task'] or '+'.join(r['job'].mix):32} seed {r['seed']}  {steps:3} steps  {cost}  {r['run_dir']}")
        if done == "other settings":
            print(f"  refused: {r['run_dir']} was run with other settings; pass another --runs")
        elif done == "to run":
            unknown |= est is None
            total += est or 0.0
    if unknown:
        print("no cost prior for this model: the total leaves those runs out")
    print(f"expected CPU time to run (a3r.leader.costs.run_seconds, whole host): {total:.0f} s = {total / 60:.0f} min; "
          "the calculator's extra calls (up to 4 per episode) are not in it")
    return None if unknown else total


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    runs = plan(args)
    if args.dry_run:
        dry_run(runs)
        return None
    expected = [expected_seconds(r["job"]) for r in runs if state(r) != "finished"]
    load_before, t0 = loadavg(), time.monotonic()
    records = []
    for r in runs:
        records.append(execute(r))
        print(f"{r['arm']} {r['task'] or ''} seed {r['seed']}: {records[-1]['accuracy']}", file=sys.stderr)
    tab = table(records, args.tasks)
    result = {
        "command": shlex.join(["python", "benchmarks/cocktail.py", *(sys.argv[1:] if argv is None else argv)]),
        "args": vars(args), "out": args.out,
        "fairness_rule": "same episodes per task in both arms: cocktail K*S steps of B (B/K per task), each specialist S steps of B",
        "split_check": split_check(runs, args.tasks),
        "runs": records, "table": tab, "summary": summarise(tab),
        "expected_s": None if any(e is None for e in expected) else sum(expected),
        "machine": machine_record(load_before), "wall_s": time.monotonic() - t0,
    }
    print(write_report(args.out, result, page, plot))
    return result


if __name__ == "__main__":
    main()
