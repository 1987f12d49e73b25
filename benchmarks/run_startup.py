"""A run's fixed costs at one slot's thread count, and the held-out evaluation at the old and the new batch.

Issue 31 (Deliver 2): besides sampling and the update, every A3R run pays a fixed price: importing the
job's modules, booting `swarm serve` to its first /health, loading the model (configure + start) and two
held-out evaluations. Each repeat measures, in this order:

    imports_s   a fresh interpreter importing what `swarm train` imports (engine.jobs, engine.launch)
    server_s    `swarm serve` spawned to its first /health (engine.jobs.ServerProcess)
    load_s      configure + start on that server: the model load
    eval_old_s  the default job's held-out set sent `concurrency` items at a time (main's evaluate)
    eval_new_s  the same items at the server's batch (`engine.jobs.eval_concurrency`: its max_batch_rows)

and the two evaluations run on the same server in rotated order (repeat k starts with the other one), with
the server's own counters around each (decode passes, biggest batch, tokens generated) and the load average
before and after every phase. The headline is old/new evaluation time per repeat: median, min and max.
Threads are set as an A3R slot sets them (`--threads`, default 1: OMP_NUM_THREADS and MKL_NUM_THREADS of
every process started here). Timings from a busy machine are indicative only.

    PYTHONPATH=$PWD python benchmarks/run_startup.py --repeats 3 --out /tmp/run_startup.json

`--smoke` (tiny model, 6 items, one repeat) is what tests/benchmarks/test_run_startup_smoke.py runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make `benchmarks` and this tree's packages importable
    sys.path.insert(0, str(REPO))

PHASES = ("imports_s", "server_s", "load_s", "eval_old_s", "eval_new_s")


def default_job(smoke: bool) -> Any:
    """A user goal's default run as A3R builds it (SmolLM2, 64 held-out items, concurrency 32), or its
    tiny smoke version."""
    from a3r.leader.blueprints import DEFAULT_BASE_JOB
    from engine.jobs import TrainJob

    data = json.loads(json.dumps(DEFAULT_BASE_JOB))
    if smoke:
        data.update(eval_size=6, concurrency=2, max_tokens=4)
        data["swarm"]["model"]["name"] = "tiny"
    data["swarm"].setdefault("training", {})["max_steps"] = 1
    return TrainJob.model_validate(data)


def time_imports() -> float:
    """Wall seconds of a fresh interpreter importing `swarm train`'s modules (interpreter start excluded)."""
    code = "import time; t = time.perf_counter(); import engine.jobs, engine.launch; print(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _counters(client) -> dict[str, int]:
    info = client.health().get("inference", {})
    return {k: info.get(k, 0) for k in ("decode_passes", "max_rows", "tokens_generated")}


def timed_eval(jobs, client, job, items, run_dir: Path, old: bool) -> dict[str, Any]:
    """One held-out evaluation; `old` sends `job.concurrency` items at a time, as evaluate did before it
    read the server's batch (the very same function, with eval_concurrency pinned to the job's)."""
    from benchmarks.common import loadavg
    from engine.training.metrics import MetricsLog

    new_rule = jobs.eval_concurrency
    if old:
        jobs.eval_concurrency = lambda concurrency, *rest: concurrency
    try:
        before, load0, t0 = _counters(client), loadavg(), time.perf_counter()
        acc = jobs.evaluate(client, job, items, "old" if old else "new", 0, MetricsLog(run_dir))
        wall = time.perf_counter() - t0
    finally:
        jobs.eval_concurrency = new_rule
    after = _counters(client)
    passes = after["decode_passes"] - before["decode_passes"]
    tokens = after["tokens_generated"] - before["tokens_generated"]
    return {
        "wall_s": wall,
        "accuracy": acc,
        "decode_passes": passes,
        "tokens_generated": tokens,
        # about the rows of an average decode pass (each prefill also yields a row's first token)
        "tokens_per_decode_pass": tokens / passes if passes else None,
        "max_rows_so_far": after["max_rows"],  # the server's biggest batch since boot
        "load_before": load0,
        "load_after": loadavg(),
    }


def one_repeat(k: int, job, items, root: Path) -> dict[str, Any]:
    import engine.jobs as jobs
    from benchmarks.common import loadavg, rotated

    rec: dict[str, Any] = {"repeat": k, "load_start": loadavg(), "imports_s": time_imports()}
    run_dir = Path(tempfile.mkdtemp(prefix=f"r{k}-", dir=root))
    t0 = time.perf_counter()
    server = jobs.ServerProcess(run_dir, log_path=run_dir / "server.log")
    try:
        rec["server_s"] = time.perf_counter() - t0
        client = server.client()
        t0 = time.perf_counter()
        client.configure(job.server_config(run_dir))
        client.start(wait=True)
        rec["load_s"] = time.perf_counter() - t0
        rec["eval_rows"] = client.health()["inference"].get("max_batch_rows")
        rec["order"] = rotated(["old", "new"], k)
        for variant in rec["order"]:
            ev = timed_eval(jobs, client, job, items, run_dir, old=variant == "old")
            rec[f"eval_{variant}"] = ev
            rec[f"eval_{variant}_s"] = ev["wall_s"]
        client.close()
    finally:
        server.stop()
    rec["load_end"] = loadavg()
    return rec


def _rows(ev: dict[str, Any]) -> str:
    return "n/a" if ev["tokens_per_decode_pass"] is None else f"{ev['tokens_per_decode_pass']:.1f}"


def summarise(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    from benchmarks.common import spread

    med = {p: statistics.median(r[p] for r in repeats) for p in PHASES}
    parts = {"imports_s": med["imports_s"], "server_s": med["server_s"], "load_s": med["load_s"]}
    # a run's fixed part: start-up plus its two evaluations (before and after), old way; proportions, not
    # seconds, are what a busy host's figures are good for
    parts["evaluations_s"] = 2 * med["eval_old_s"]
    total = sum(parts.values())
    return {
        "median_s": med,
        "share_old": {k: v / total for k, v in parts.items()},
        "eval_old_over_new": spread([r["eval_old_s"] / r["eval_new_s"] for r in repeats]),
        "accuracy_equal": all(r["eval_old"]["accuracy"] == r["eval_new"]["accuracy"] for r in repeats),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads of every process (an A3R slot's)")
    p.add_argument("--smoke", action="store_true", help="tiny model, 6 items, one repeat (tests)")
    p.add_argument("--out", type=Path, help="write the result JSON here")
    args = p.parse_args(argv)
    # The child processes (interpreters, servers) inherit the slot's thread settings from this environment;
    # restored afterwards, so a caller in the same process (a test worker) does not keep them.
    saved = {var: os.environ.get(var) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update({var: str(args.threads) for var in saved})
    try:
        return _run(args, argv)
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def _run(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    from benchmarks.common import fmt_spread, loadavg, machine_record
    from engine.tasks import get_task
    from engine.tasks.base import split_items

    load0 = loadavg()
    job = default_job(args.smoke)
    _, items = split_items(get_task(job.task), 1, job.eval_size, job.seed, job.eval_seed)
    repeats = []
    with tempfile.TemporaryDirectory(prefix="run_startup-") as root:
        for k in range(1 if args.smoke else args.repeats):
            repeats.append(one_repeat(k, job, items, Path(root)))
            r = repeats[-1]
            print(
                f"repeat {k}: imports {r['imports_s']:.1f} s, server {r['server_s']:.1f} s, load {r['load_s']:.1f} s, "
                f"eval old {r['eval_old_s']:.1f} s / new {r['eval_new_s']:.1f} s ({len(items)} items, "
                f"{job.concurrency} vs {r['eval_rows']} at once; tokens per decode pass "
                f"{_rows(r['eval_old'])} vs {_rows(r['eval_new'])}), load {r['load_start']} -> {r['load_end']}",
                flush=True,
            )
    result = {
        "command": "benchmarks/run_startup.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "threads": args.threads,
        "model": job.swarm.model.name,
        "eval_items": len(items),
        "job_concurrency": job.concurrency,
        "repeats": repeats,
        "summary": summarise(repeats),
        "machine": machine_record(load0),
    }
    s = result["summary"]
    print("median s: " + ", ".join(f"{k} {v:.1f}" for k, v in s["median_s"].items()))
    print("share of a run's fixed part (start-up + 2 evaluations, old): " + ", ".join(f"{k} {v:.0%}" for k, v in s["share_old"].items()))
    print(f"evaluation old/new: {fmt_spread(s['eval_old_over_new'])}; same accuracy: {s['accuracy_equal']}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
