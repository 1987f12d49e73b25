"""Where a run's wall time goes, and two code trees side by side (issue 31).

One run is `engine.jobs.train_single` of a job built the way A3R builds it, in a child process whose
PYTHONPATH is the variant's tree (so "main" runs main's engine, main's defaults, main's checkpoint policy),
timed by wrapping the job's own functions (this script's instrumentation, the variant's code):

    process_s      spawn of the child -> its first line (interpreter start)
    imports_s      importing the variant's engine and A3R modules
    server_s       `swarm serve` subprocess spawn -> /health
    load_s         configure + start: the model load (after a restart too)
    eval_s         each held-out evaluation (items recorded, so a per-item figure follows)
    sample_s       each step's episodes (sampling, tool calls, rewards), client side
    step_wait_s    the client's wait for each step (update + checkpoint + up to 0.2 s of polling)
    update_s, checkpoint_s   the server's own split of each step (its status after each step; absent in
                   trees before issue 31, where only their sum, step_time_s, is reported)
    other_s        train_single's remainder: summary, checkpoint deletion, server stop
    wall_s         the whole child, spawn to exit

The leader's and scheduler's overhead between runs (dispatch, worker start, result recording) is not in
a run: `benchmarks/a3r_scheduler.py` measures it (worker start-up, slot turnaround), and runs per hour
here are per slot, back to back.

Shapes: `default` is A3R's default run of a user goal (`DEFAULT_BASE_JOB`, arithmetic, the research
budget's steps), `demo` the demo's reference arm (`DEMO_SETTINGS`, batch size 8, the demo budget's steps);
`--set KEY=VALUE` overrides either. Variants are compared interleaved (repeat k runs them in rotated
order), with the load average before and after each run, and the ratio of wall times per repeat reported
as median and spread. The leader's cost model (`a3r.leader.costs.run_seconds`, this tree's) is printed
beside each measured run, so its ETA can be checked against the wall time term by term.

Cost-model constants: after the table the script prints `RUN_COST["<model>"] = RunCost(...)` fitted to the
first variant's median run (`a3r.leader.costs.fit_run_cost`: start from process + imports + server + load
+ other, sampling and update per episode-token after the optimizer's own per-step time, eval per item,
checkpoint per write); pasting it over that model's line in a3r/leader/costs.py recalibrates the leader.

Slots (issue 31, Deliver 4): `--slots` measures, interleaved, one run with 2 threads (`1x2`: one slot
owning both cores) against two concurrent runs with 1 thread each (`2x1`: two slots of one thread, seeds
0 and 1, the same shape, so the same evidence per run), threads set the way an A3R slot sets them
(OMP_NUM_THREADS / MKL_NUM_THREADS, a3r.config.SlotSpec.threads). Runs per hour: 3600 / wall for 1x2,
2 x 3600 / (wall until both finish) for 2x1.

    python benchmarks/run_cost.py --shape default --main-commit main --repeats 3 --out docs/benchmarks/run_cost.json
    python benchmarks/run_cost.py --shape default --slots --repeats 3 --out docs/benchmarks/run_cost_slots.json
    python benchmarks/run_cost.py --shape default --slots --main-commit c04b1a9 --layouts 2x1 --repeats 3 \
        --out docs/benchmarks/run_cost_slots_vs_main.json   # runs per hour: this tree's two 1-thread
        # slots against main's one default slot, interleaved
    python benchmarks/run_cost.py --smoke     # tiny model, 1 step, two runs of this tree: the script works
    python benchmarks/run_cost.py --smoke --slots    # the same for the slots comparison
"""

from __future__ import annotations

import time

_CHILD_FIRST_LINE_AT = time.time()  # before any import: the end of the interpreter's start

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

SMOKE_SETS = (
    "swarm.model.name=tiny",
    "swarm.training.max_steps=1",
    "swarm.pool.batch_size=2",
    "swarm.pool.group_size=2",
    "swarm.training.mini_batch_size=4",
    "swarm.training.micro_batch_size=2",
    "eval_size=4",
    "max_tokens=4",
    "concurrency=4",
)
SERVER_SPLIT = ("step_time_s", "update_s", "checkpoint_s", "checkpoint_written", "train_optimizer_s")
TERMS = ("process_s", "imports_s", "server_s", "load_s", "eval_s", "sample_s", "step_wait_s", "other_s")


# -- the child: one instrumented run of the variant on PYTHONPATH -------------------------------------
class Timer:
    """Seconds per term, each occurrence kept (a run has several evaluations and steps)."""

    def __init__(self) -> None:
        self.events: dict[str, list[float]] = {}

    @contextmanager
    def __call__(self, term: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.events.setdefault(term, []).append(time.perf_counter() - t0)

    def wrap(self, owner: Any, name: str, term: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self(term):
                return original(*args, **kwargs)

        setattr(owner, name, timed)


def build_job(shape: str, sets: list[str]) -> dict[str, Any]:
    """The job data of a shape, from the imported tree's own defaults, with `sets` applied last."""
    from a3r.blueprints import deep_merge
    from a3r.cli_values import parse_value
    from a3r.leader.blueprints import DEFAULT_BASE_JOB
    from a3r.leader.knobs import set_dotted

    job = deep_merge(DEFAULT_BASE_JOB, {})
    if shape == "default":
        from a3r.leader.design import ResearchBudget

        extra = ["task=arithmetic", f"swarm.training.max_steps={ResearchBudget().steps}"]
    elif shape == "demo":
        from a3r.leader.demo import DEMO_BUDGET, DEMO_SETTINGS

        extra = [*DEMO_SETTINGS, "task=arithmetic", "swarm.pool.batch_size=8"]
        extra.append(f"swarm.training.max_steps={DEMO_BUDGET['steps']}")
    else:
        raise SystemExit(f"unknown shape {shape!r}: default or demo")
    for item in [*extra, "seed=0", *sets]:
        key, _sep, value = item.partition("=")
        set_dotted(job, key.strip(), parse_value(value))
    return job


def child(spec: dict[str, Any]) -> None:
    process_s = _CHILD_FIRST_LINE_AT - spec["spawned_at"]
    timer = Timer()
    with timer("imports_s"):
        import engine.jobs as jobs
        from engine.client import SwarmClient

        data = build_job(spec["shape"], spec["sets"])
        job = jobs.TrainJob.model_validate(data)
    timer.wrap(jobs.ServerProcess, "__init__", "server_s")
    timer.wrap(SwarmClient, "configure", "load_s")
    timer.wrap(SwarmClient, "start", "load_s")
    timer.wrap(SwarmClient, "wait_for_step", "step_wait_s")
    server_steps: list[dict[str, Any]] = []
    wait_for_step = SwarmClient.wait_for_step

    def recorded_wait(self, *args, **kwargs):
        # The server's split of the step just waited for (its metrics file holds only the trainer's).
        st = wait_for_step(self, *args, **kwargs)
        m = st.get("last_metrics") or {}
        server_steps.append({"step": st.get("global_step"), **{k: m.get(k) for k in SERVER_SPLIT}})
        return st

    SwarmClient.wait_for_step = recorded_wait
    timer.wrap(jobs, "_run_mixed_step", "sample_s")
    items: list[int] = []
    evaluate = jobs.evaluate

    def timed_evaluate(*args, **kwargs):
        items.append(len(args[2] if len(args) > 2 else kwargs["items"]))  # evaluate(client, job, items, ...)
        with timer("eval_s"):
            return evaluate(*args, **kwargs)

    jobs.evaluate = timed_evaluate
    run_dir = Path(spec["run_dir"])
    t0 = time.perf_counter()
    jobs.train_single(job, run_dir)
    train_s = time.perf_counter() - t0
    measured = sum(sum(v) for k, v in timer.events.items() if k != "imports_s")
    out = {
        "job": data,
        "process_s": process_s,
        "terms": {k: v for k, v in timer.events.items()},
        "eval_items": items,
        "server_steps": server_steps,
        "train_s": train_s,
        "other_s": train_s - measured,
    }
    Path(spec["out"]).write_text(json.dumps(out))


# -- the parent: variants, interleaved repeats, the report ----------------------------------------------
def start_child(
    name: str, tree: Path, shape: str, sets: list[str], work: Path, k: int, threads: int | None = None
) -> dict[str, Any]:
    """Spawn one child run of `tree` (with `threads` CPU threads, set as an A3R slot sets them) without
    waiting for it; `finish_child` collects it."""
    from benchmarks.common import loadavg, slot_env

    run_dir = work / f"{name}-{k}"
    out = work / f"{name}-{k}.json"
    env = slot_env(threads, tree)
    load_before = loadavg()
    spec = {"shape": shape, "sets": sets, "run_dir": str(run_dir), "out": str(out), "spawned_at": time.time()}
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return {
        "name": name,
        "tree": tree,
        "k": k,
        "out": out,
        "proc": proc,
        "t0": time.perf_counter(),
        "load_before": load_before,
        "threads": threads,
    }


def finish_child(started: dict[str, Any]) -> dict[str, Any]:
    """Wait for a child run; its terms, wall time (spawn to exit), thread count and the load around it."""
    from benchmarks.common import loadavg

    proc = started["proc"]
    _stdout, stderr = proc.communicate()
    wall_s = time.perf_counter() - started["t0"]
    if proc.returncode != 0:
        raise SystemExit(
            f"variant {started['name']} ({started['tree']}) failed with code {proc.returncode}:\n{stderr[-4000:]}"
        )
    result = json.loads(started["out"].read_text())
    return {
        "variant": started["name"],
        "repeat": started["k"],
        "wall_s": wall_s,
        "threads": started["threads"],
        "loadavg_before": started["load_before"],
        "loadavg_after": loadavg(),
        **result,
    }


def run_variant(name: str, tree: Path, shape: str, sets: list[str], work: Path, k: int) -> dict[str, Any]:
    """One child run of `tree`; its terms, wall time and the load around it."""
    return finish_child(start_child(name, tree, shape, sets, work, k))


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """One run's totals per term, per-step and per-item figures, and this tree's cost-model ETA for it."""
    from a3r.leader.costs import run_seconds

    terms = {t: sum(run["terms"].get(t, [])) for t in TERMS if t not in ("process_s", "other_s")}
    terms["process_s"] = run["process_s"]
    terms["other_s"] = run["other_s"]
    server = run["server_steps"]
    steps = max(1, len(run["terms"].get("sample_s", [])))
    split = {
        k: (sum(s[k] for s in server) if server and all(s.get(k) is not None for s in server) else None)
        for k in SERVER_SPLIT
    }
    # priced at the run's thread count: a 2x1 run at the 1-thread constants, a 1x2 run at the whole host's;
    # a run that reused a cached step-0 evaluation (one evaluation recorded, not two) without it
    reused_eval0 = len(run["eval_items"]) == 1
    eta = run_seconds(run["job"], int(run["job"]["swarm"]["training"]["max_steps"]), run.get("threads"),
                      eval0=not reused_eval0)
    return {
        **terms,
        **split,
        "wall_s": run["wall_s"],
        "per_step_s": (terms["sample_s"] + terms["step_wait_s"]) / steps,
        "per_eval_item_s": terms["eval_s"] / max(1, sum(run["eval_items"])),
        "runs_per_hour": 3600.0 / run["wall_s"],
        "eval0_reused": reused_eval0,
        "eta_s": eta,
        "eta_over_wall": eta / run["wall_s"] if eta is not None else None,
    }


def compare(runs: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Per variant the median of every figure; per other variant its speed-up over the first, per repeat."""
    import statistics

    from benchmarks.common import spread

    by = {n: [summarize(r) for r in runs if r["variant"] == n] for n in names}
    medians = {
        n: {
            k: statistics.median(v[k] for v in rows) if all(v[k] is not None for v in rows) else None
            for k in rows[0]
        }
        for n, rows in by.items()
    }
    base = names[0]
    speedup = {}
    for n in names[1:]:
        pairs = [(a["wall_s"], b["wall_s"]) for a, b in zip(by[base], by[n], strict=True)]
        speedup[n] = spread([wa / wb for wa, wb in pairs])  # > 1: n does more runs per hour than base
    return {"per_run": by, "median": medians, "speedup_over_" + base: speedup}


def print_table(result: dict[str, Any]) -> None:
    med = result["median"]
    names = list(med)
    keys = [
        *TERMS,
        "step_time_s",
        "update_s",
        "checkpoint_s",
        "wall_s",
        "per_step_s",
        "per_eval_item_s",
        "runs_per_hour",
        "eta_s",
        "eta_over_wall",
    ]
    print(f"{'median':<18}" + "".join(f"{n:>16}" for n in names))
    for k in keys:
        cells = "".join(f"{med[n][k]:>16.3f}" if med[n][k] is not None else f"{'n/a':>16}" for n in names)
        print(f"{k:<18}{cells}")
    from benchmarks.common import fmt_spread

    for key, per in result.items():
        if key.startswith("speedup_over_"):
            for n, s in per.items():
                print(f"{n} runs per hour over {key.removeprefix('speedup_over_')}: {fmt_spread(s)}")


def fitted_cost_line(run: dict[str, Any]) -> str:
    """The `RUN_COST[...] = RunCost(...)` line that reproduces `run` (a summarized run of this tree's job),
    for a3r/leader/costs.py. The optimizer's per-step time is the update's fixed part; sampling has none
    from one shape (see costs.py)."""
    from a3r.leader.costs import FINAL_WRITE_SHARE, episode_tokens, fit_run_cost

    job = run["job"]
    steps = int(job["swarm"]["training"]["max_steps"])
    server = run["server_steps"]
    writes = sum(
        (FINAL_WRITE_SHARE if s.get("step") == steps else 1.0) * float(s.get("checkpoint_written") or 0.0)
        for s in server
    )
    optimizer = [s.get("train_optimizer_s") for s in server]
    update_step = sum(optimizer) / len(optimizer) if optimizer and None not in optimizer else 0.0
    breakdown = summarize(run)
    cost = fit_run_cost(
        {k: breakdown[k] or 0.0 for k in (*TERMS, "update_s", "checkpoint_s")},
        steps=steps,
        episode_tokens=episode_tokens(job),
        eval_items=sum(run["eval_items"]),
        checkpoint_writes=writes,
        update_step=update_step,
    )
    fields = ", ".join(f"{f}={getattr(cost, f):.4g}" for f in cost.__dataclass_fields__)
    line = f'RUN_COST["{job["swarm"]["model"]["name"]}"] = RunCost({fields})'
    missing = [
        k for k in ("checkpoint_written", "train_optimizer_s") if any(s.get(k) is None for s in server)
    ]
    # a tree before issue 31's server metrics: those terms cannot be fitted from its run; keep the old ones
    return line + (f"  # not recorded by this tree's server: {', '.join(missing)}" if missing else "")


def median_run(runs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The run of variant `name` with the median wall time (the lower middle of an even count)."""
    mine = sorted((r for r in runs if r["variant"] == name), key=lambda r: r["wall_s"])
    return mine[(len(mine) - 1) // 2]


SLOT_LAYOUTS = {"1x2": (1, 2), "2x1": (2, 1)}  # name: (concurrent runs, threads each)


def run_slots(
    tree: Path, shape: str, sets: list[str], work: Path, k: int, layout: str, variant: str = "current"
) -> dict[str, Any]:
    """One round of a slot layout of `variant`'s tree: its runs side by side (seeds 0, 1, ...), and the
    wall until the last ends. Runs per hour count every run of the round."""
    n, threads = SLOT_LAYOUTS[layout]
    t0 = time.perf_counter()
    started = [
        start_child(f"{variant}-{layout}-s{i}", tree, shape, [*sets, f"seed={i}"], work, k, threads=threads)
        for i in range(n)
    ]
    runs = [finish_child(s) for s in started]
    wall_s = time.perf_counter() - t0
    return {
        "variant": variant,
        "layout": layout,
        "repeat": k,
        "runs": n,
        "threads": threads,
        "seeds": [r["job"]["seed"] for r in runs],
        "wall_s": wall_s,
        "runs_per_hour": n * 3600.0 / wall_s,
        "loadavg_before": runs[0]["loadavg_before"],
        "loadavg_after": runs[-1]["loadavg_after"],
        "per_run": [{**summarize(r), "threads": r["threads"]} for r in runs],
    }


def compare_slots(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (variant, layout) the median runs per hour; per repeat, this tree's 2x1 over its 1x2 (> 1: two
    1-thread slots do more runs per hour) and, with a main baseline, each of this tree's layouts over
    main's one slot."""
    import statistics

    from benchmarks.common import spread

    by: dict[str, list[dict[str, Any]]] = {}
    for r in rounds:
        by.setdefault(f"{r.get('variant', 'current')} {r['layout']}", []).append(r)

    def ratio(num: str, den: str) -> dict[str, Any]:
        pairs = zip(by[den], by[num], strict=True)
        return spread([b["runs_per_hour"] / a["runs_per_hour"] for a, b in pairs])

    out: dict[str, Any] = {
        "median_runs_per_hour": {n: statistics.median(r["runs_per_hour"] for r in rs) for n, rs in by.items()}
    }
    if "current 1x2" in by and "current 2x1" in by:
        out["two_slots_over_one"] = ratio("current 2x1", "current 1x2")
    if "main 1x2" in by:
        out["over_main_one_slot"] = {n: ratio(n, "main 1x2") for n in by if n.startswith("current")}
    return out


def slots_main(args: argparse.Namespace, sets: list[str]) -> dict[str, Any]:
    """`--slots`: this tree's layouts (`--layouts`, default 1x2 and 2x1) interleaved, and with
    `--main-commit` main's one 2-thread slot (A3R's default then) in every repeat as the baseline."""
    from benchmarks.common import fmt_spread, loadavg, machine_record, rotated, worktree_at

    layouts = args.layouts or list(SLOT_LAYOUTS)
    load_before = loadavg()
    rounds = []
    with (
        tempfile.TemporaryDirectory(prefix="run_cost-slots-") as tmp,
        worktree_at(args.main_commit) if args.main_commit else _nothing() as main_tree,
    ):
        plan = [("current", REPO, layout) for layout in layouts]
        if main_tree is not None:
            plan.insert(0, ("main", Path(main_tree), "1x2"))
        for k in range(args.repeats):
            for variant, tree, layout in rotated(plan, k):
                rounds.append(run_slots(tree, args.shape, sets, Path(tmp), k, layout, variant))
                r = rounds[-1]
                print(
                    f"repeat {k} {variant} {layout}: {r['runs']} run(s) in {r['wall_s']:.1f} s, "
                    f"{r['runs_per_hour']:.2f} runs/h (load {r['loadavg_after']})",
                    flush=True,
                )
    result = {
        "shape": args.shape,
        "sets": sets,
        "repeats": args.repeats,
        "main_commit": args.main_commit,
        "machine": machine_record(load_before),
        **compare_slots(rounds),
        "rounds": rounds,
    }
    for n, v in result["median_runs_per_hour"].items():
        print(f"{n}: median {v:.2f} runs per hour")
    if "two_slots_over_one" in result:
        print(f"2x1 runs per hour over 1x2: {fmt_spread(result['two_slots_over_one'])}")
    for n, v in result.get("over_main_one_slot", {}).items():
        print(f"{n} runs per hour over main 1x2: {fmt_spread(v)}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--shape", choices=("default", "demo"), default="default")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a code tree to run (repeatable); the first is the baseline. Default: this tree",
    )
    ap.add_argument(
        "--main-commit", metavar="REV", help="add a baseline variant 'main': a git worktree of REV"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--smoke", action="store_true", help="tiny model, 1 step, one repeat of two runs of this tree"
    )
    ap.add_argument(
        "--slots",
        action="store_true",
        help="one run with 2 threads against two concurrent runs with 1 thread each (this tree)",
    )
    ap.add_argument(
        "--layouts",
        nargs="+",
        choices=list(SLOT_LAYOUTS),
        help="with --slots: this tree's layouts to run (default all)",
    )
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    args = ap.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return {}
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from benchmarks.common import loadavg, machine_record, worktree_at

    variants = [tuple(v.split("=", 1)) for v in args.variant]
    sets = list(args.sets)
    if args.smoke:
        sets = [*SMOKE_SETS, *sets]
        variants = variants or [("a", str(REPO)), ("b", str(REPO))]
        args.repeats = 1
    if args.slots:
        if variants and not args.smoke:
            raise SystemExit("--slots measures this tree (and main with --main-commit): drop --variant")
        return slots_main(args, sets)
    load_before = loadavg()
    with (
        tempfile.TemporaryDirectory(prefix="run_cost-runs-") as tmp,
        worktree_at(args.main_commit) if args.main_commit else _nothing() as main_tree,
    ):
        # --main-commit alone compares main with this tree; with --variant, with those trees
        variants = variants or [("current", str(REPO))]
        if main_tree is not None:
            variants = [("main", str(main_tree)), *variants]
        if len(variants) > 1 and not all(Path(p).is_dir() for _, p in variants):
            raise SystemExit(f"every --variant PATH must be a directory: {variants}")
        names = [n for n, _ in variants]
        if len(set(names)) != len(names):
            raise SystemExit(f"variant names must differ: {names}")
        from benchmarks.common import rotated

        runs = []
        for k in range(args.repeats):
            for name, tree in rotated(variants, k):
                runs.append(run_variant(name, Path(tree), args.shape, sets, Path(tmp), k))
                print(f"repeat {k} {name}: {runs[-1]['wall_s']:.1f} s (load {runs[-1]['loadavg_after']})")
    result = {
        "shape": args.shape,
        "sets": sets,
        "variants": dict(variants),
        "repeats": args.repeats,
        "machine": machine_record(load_before),
        **compare(runs, names),
        "runs": runs,
    }
    print_table(result)
    print("cost model fitted to the median run of " + names[0] + " (paste into a3r/leader/costs.py):")
    print("    " + fitted_cost_line(median_run(runs, names[0])))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return result


@contextmanager
def _nothing():
    yield None


if __name__ == "__main__":
    main()
