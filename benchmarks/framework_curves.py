"""Framework independence in training curves: the same task and seeds trained through several client stacks.

The swarm server sees only HTTP: which library made the request should not change what is trained. Token
identity across stacks is tested per call (tests/engine/server/test_server_http.py); this benchmark checks
the training result. Each seed trains `arithmetic` once per client stack (`benchmarks/client_stacks.py`:
the OpenAI SDK, raw httpx, LangChain's ChatOpenAI and a LangGraph agent), each a full `engine.jobs.train_single`
run (a real `swarm serve` subprocess) with the same job: same problems, same sampling streams
(`swarm.model.seed` and the task ids), and `inference.batch_invariant` on (unless --no-batch-invariant),
so a run repeats bit for bit (docs/engine.md, "Reproducible runs").

For every logged per-step metric of the runs (the server's training metrics, the client's held-out
accuracy), it reports each stack's per-step difference from the reference stack (the first) and the
maximum over steps and seeds, against the 0.025 within which the swarm paper reports its curves. Timing
and throughput metrics are left out: they measure the machine, not the training.

`--plant STACK:FIELD=VALUE` changes one stack's job (FIELD: temperature or seed) to check that a real
difference shows: the smoke test (tests/benchmarks/test_framework_curves_smoke.py) plants one.

    python benchmarks/framework_curves.py --model tiny --steps 2 --eval-size 4 --out /tmp/fc   # smoke
    python benchmarks/framework_curves.py                     # SmolLM2-135M: 2 seeds x 4 stacks, 8 steps
    python benchmarks/framework_curves.py --no-batch-invariant --out docs/benchmarks/framework_curves_batched

The cost model (a3r.leader.costs) puts one SmolLM2 run of the default shape at about 120 s, so 8 runs at
about 16 min; it was calibrated with batched decoding, and batch-invariant decoding (one request at a
time) makes sampling slower by a factor not measured yet.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import engine.jobs as jobs  # noqa: E402
from a3r.leader.costs import run_seconds  # noqa: E402
from benchmarks.client_stacks import STACKS, StackArithmetic  # noqa: E402
from benchmarks.common import loadavg, machine_record, write_report  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.training.metrics import read_run_metrics  # noqa: E402

PAPER_TOLERANCE = 0.025
# The curves the paper compares: the training reward and the held-out accuracy.
CURVE_METRICS = ("reward_mean", "eval_accuracy")
# Per-step records that measure the machine (durations in seconds end in `_s`; rates, memory), not the training.
MACHINE_WORDS = ("time", "per_s", "throughput", "memory", "rss", "mib", "wall", "cpu")
PLANTABLE = ("temperature", "seed")


def job_for(seed: int, args: argparse.Namespace) -> jobs.TrainJob:
    """The one job every stack runs for `seed` (checkpoints off: nothing resumes, nothing to clean up)."""
    return jobs.TrainJob(
        task="arithmetic",
        seed=seed,
        eval_size=args.eval_size,
        eval_every=args.eval_every,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        concurrency=args.batch * args.group,
        keep_final_checkpoint=False,
        swarm=SwarmConfig(
            model={"name": args.model, "seed": seed},
            inference={"batch_invariant": args.batch_invariant},
            pool={"policy": "task_count", "batch_size": args.batch, "group_size": args.group},
            training={
                "max_steps": args.steps, "lr": args.lr, "mini_batch_size": args.batch * args.group,
                "micro_batch_size": min(8, args.batch * args.group), "checkpoint_every": 0,
            },
        ),
    )


def parse_plant(spec: str) -> tuple[str, str, float]:
    """`STACK:FIELD=VALUE` -> (stack, field, value); a ValueError naming what is wrong."""
    stack, _, rest = spec.partition(":")
    field, _, value = rest.partition("=")
    if stack not in STACKS or field not in PLANTABLE or not value:
        raise ValueError(f"--plant takes STACK:FIELD=VALUE with STACK in {list(STACKS)} and FIELD in {list(PLANTABLE)}, got {spec!r}")
    return stack, field, float(value)


def planted(job: jobs.TrainJob, field: str, value: float) -> jobs.TrainJob:
    """`job` with one field changed: the temperature of its training episodes, or its seed (other problems)."""
    return job.model_copy(update={field: int(value) if field == "seed" else value})


@contextlib.contextmanager
def played_through(stack: str) -> Iterator[None]:
    """While inside, `swarm train`'s job loop plays `arithmetic` through `stack`. The engine looks a task up
    by name (engine.jobs.get_task) and has no client-stack option, since the stack is the user's own code;
    substituting the task object is the one change, so everything else (server, pool, evaluation) is the
    unmodified `train_single`."""
    original = jobs.get_task
    task = StackArithmetic(stack)
    jobs.get_task = lambda name: task if name == "arithmetic" else original(name)
    try:
        yield
    finally:
        jobs.get_task = original


def is_training_metric(key: str, value: Any) -> bool:
    """A per-step number that the training decides (not the machine, not the step counter)."""
    if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not key.endswith("_s") and not any(w in key.lower() for w in MACHINE_WORDS)


def step_series(rows: list[dict]) -> dict[str, dict[int, float]]:
    """metric -> {step: value} from a run's metrics records (a later record of a step wins)."""
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        if "step" not in row:
            continue
        for k, v in row.items():
            if is_training_metric(k, v):
                out.setdefault(k, {})[int(row["step"])] = float(v)
    return out


def differences(runs: dict[str, dict[str, dict[int, float]]], reference: str) -> dict[str, dict[str, Any]]:
    """Per metric and stack: |stack - reference| at every step both logged, and its maximum. A metric one
    stack logged at a step the reference did not (or the reverse) is a difference too (`missing`)."""
    ref = runs[reference]
    out: dict[str, dict[str, Any]] = {}
    for metric in sorted(set().union(*(set(s) for s in runs.values()))):
        per_stack: dict[str, Any] = {}
        for stack, series in runs.items():
            if stack == reference:
                continue
            a, b = ref.get(metric, {}), series.get(metric, {})
            steps = sorted(set(a) & set(b))
            diffs = {s: _gap(a[s], b[s]) for s in steps}
            per_stack[stack] = {
                "per_step": diffs,
                "max": max(diffs.values(), default=0.0),
                "missing_steps": sorted(set(a) ^ set(b)),
            }
        out[metric] = per_stack
    return out


def _gap(x: float, y: float) -> float:
    """|x - y|; two NaNs (a step whose mean had no episodes) are equal, one NaN is an infinite gap."""
    if math.isnan(x) and math.isnan(y):
        return 0.0
    return math.inf if math.isnan(x) or math.isnan(y) else abs(x - y)


def summarize(per_seed: dict[int, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per metric: the largest difference of any stack, step and seed, where it was, and how many steps one
    side logged alone; `within_paper` when that maximum is within the paper's 0.025 and no step is missing."""
    out: dict[str, dict[str, Any]] = {}
    for seed, metrics in per_seed.items():
        for metric, stacks in metrics.items():
            cur = out.setdefault(metric, {"max": 0.0, "where": None, "missing_steps": 0})
            for stack, d in stacks.items():
                cur["missing_steps"] += len(d["missing_steps"])
                for step, gap in d["per_step"].items():
                    if cur["where"] is None or gap > cur["max"]:
                        cur["max"], cur["where"] = gap, {"seed": seed, "stack": stack, "step": step}
    for cur in out.values():
        cur["within_paper"] = cur["max"] <= PAPER_TOLERANCE and cur["missing_steps"] == 0
    return out


def markdown(report: dict[str, Any]) -> str:
    """The benchmark page: the command, the setting, and per metric the largest per-step difference."""
    cfg = report["config"]
    lines = [
        "# Framework independence in training curves",
        "",
        f"`{report['command']}`",
        "",
        f"Model `{cfg['model']}`, task `arithmetic`, {cfg['steps']} steps of {cfg['batch']} tasks x {cfg['group']} "
        f"episodes, temperature {cfg['temperature']}, max_tokens {cfg['max_tokens']}, lr {cfg['lr']}, "
        f"{cfg['eval_size']} held-out items (greedy) every {cfg['eval_every'] or 'end'} step(s); seeds "
        f"{cfg['seeds']}; stacks {cfg['stacks']} (reference: `{cfg['stacks'][0]}`); `inference.batch_invariant` "
        f"{'on' if cfg['batch_invariant'] else 'off'}.",
    ]
    if cfg.get("plant"):
        lines += ["", f"Planted difference: `{cfg['plant']}` (this stack's job differs on purpose)."]
    lines += [
        "",
        f"Per metric: the largest |stack - reference| over stacks, steps and seeds (the paper: within {PAPER_TOLERANCE}).",
        "",
        "| metric | max difference | where (seed, stack, step) | steps logged by one side only | within 0.025 |",
        "| --- | --- | --- | --- | --- |",
    ]
    summary = report["summary"]
    order = [m for m in CURVE_METRICS if m in summary] + [m for m in summary if m not in CURVE_METRICS]
    for m in order:
        s = summary[m]
        w = s["where"] or {}
        where = f"{w.get('seed')}, {w.get('stack')}, {w.get('step')}" if w else "-"
        lines.append(f"| {m} | {s['max']:.3g} | {where} | {s['missing_steps']} | {'yes' if s['within_paper'] else 'no'} |")
    curves = [summary[m]["max"] for m in CURVE_METRICS if m in summary]
    lines += [
        "",
        f"Largest difference of the curves the paper compares ({', '.join(CURVE_METRICS)}): "
        f"{max(curves, default=float('nan')):.3g}.",
        "",
        f"Machine: {report['machine']['processor']}, {report['machine']['cpu_count']} CPUs; wall {report['wall_s']:.0f} s. The plot: "
        f"`{Path(report['out']).name}.png`.",
    ]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Reward and held-out accuracy per step, one line per (seed, stack)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in CURVE_METRICS if any(m in r["series"] for r in report["runs"])]
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(5.5 * max(1, len(metrics)), 4), squeeze=False)
    styles = dict(zip(report["config"]["stacks"], ("-", "--", ":", "-."), strict=False))
    for ax, m in zip(axes[0], metrics, strict=False):
        for r in report["runs"]:
            pts = sorted((int(s), v) for s, v in r["series"].get(m, {}).items())
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, styles.get(r["stack"], "-"), marker="o", label=f"seed {r['seed']} {r['stack']}")
        ax.set(xlabel="training step", ylabel=m, title=m)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--stacks", nargs="+", default=list(STACKS), choices=list(STACKS))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8, help="tasks per step (B)")
    ap.add_argument("--group", type=int, default=8, help="episodes per task (N)")
    ap.add_argument("--lr", type=float, default=1.5e-5)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--eval-size", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=True,
                    help="decode each request alone so a run repeats bit for bit (default); --no-batch-invariant "
                    "batches concurrent requests: faster, and log-probs move by ~1e-6 with the rows beside them")
    ap.add_argument("--plant", default=None, help="STACK:FIELD=VALUE: change one stack's job on purpose")
    ap.add_argument("--out", default="docs/benchmarks/framework_curves", help="writes OUT.json, OUT.md, OUT.png")
    ap.add_argument("--runs", default=None, help="run dirs (default runs/<name of --out>): a finished run dir is "
                    "reused as it is, so another setting needs another folder")
    args = ap.parse_args(argv)
    plant = parse_plant(args.plant) if args.plant else None
    args.runs = args.runs or str(Path("runs") / Path(args.out).name)
    if plant and plant[0] == args.stacks[0]:
        raise SystemExit("plant the difference in a stack other than the reference (the first of --stacks)")

    base = job_for(args.seeds[0], args).model_dump(mode="json")
    expected = run_seconds(base, args.steps)
    if expected is not None:
        n = len(args.seeds) * len(args.stacks)
        print(f"{n} runs, about {expected:.0f} s each by a3r.leader.costs ({n * expected / 60:.0f} min in all)")
    load_before, t0 = loadavg(), time.time()
    runs, per_seed = [], {}
    for seed in args.seeds:
        series = {}
        for stack in args.stacks:
            job = job_for(seed, args)
            if plant and plant[0] == stack:
                job = planted(job, plant[1], plant[2])
            run_dir = Path(args.runs) / f"seed{seed}" / stack
            t = time.time()
            with played_through(stack):
                jobs.train_single(job, run_dir)
            series[stack] = step_series(read_run_metrics(run_dir))
            runs.append({"seed": seed, "stack": stack, "run_dir": str(run_dir), "wall_s": time.time() - t, "series": series[stack]})
        per_seed[seed] = differences(series, args.stacks[0])
    report = {
        "command": "python benchmarks/framework_curves.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": vars(args),
        "out": args.out,
        "machine": machine_record(load_before),
        "expected_run_s": expected,
        "wall_s": time.time() - t0,
        "runs": runs,
        "differences": per_seed,
        "summary": summarize(per_seed),
    }
    print(write_report(args.out, report, markdown, plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
