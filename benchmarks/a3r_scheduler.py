"""Benchmark of the A3R execution plane on the local host (real tmux, real workers, real SQLite).

1. Makespan: 40 sleep-based runs of varying length (seeded, uniform in [--min-s, --max-s]) submitted in
   random order to 4 slots, scheduled by a real `a3r monitor` process. Compared with
   - the lower bound max(sum / slots, longest) no schedule can beat,
   - LPT (longest processing time first, a 4/3-approximation that knows the durations),
   - zero-overhead FIFO list scheduling in submission order (what this scheduler would achieve if
     dispatching, worker start-up and result recording took no time).
   Also reported: worker start-up (dispatch -> job started) and slot turnaround (attempt end -> next
   attempt dispatched on that slot).
2. Recovery latency: a worker is killed (SIGKILL of the worker process, or `tmux kill-pane`) while its
   run is running, or hangs (heartbeats stop, pane and job alive: tests/a3r/hooks/hang_worker.py);
   measured from the kill (for a hang: the last heartbeat) to the attempt being declared stale
   (detection) and to the retry's worker running the job again (restart, includes the retry backoff).

    .venv/bin/python benchmarks/a3r_scheduler.py --write-docs   # updates docs/a3r-execution.md
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.api import Workspace  # noqa: E402
from a3r.blueprints import Blueprint, Budget  # noqa: E402
from a3r.config import HostSpec, SchedulerConfig, WorkspaceConfig  # noqa: E402
from benchmarks.common import loadavg, machine_record  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "a3r-execution.md"
HANG_HOOK = Path(__file__).resolve().parents[1] / "tests" / "a3r" / "hooks" / "hang_worker.py"
BEGIN, END = "<!-- a3r-bench:begin -->", "<!-- a3r-bench:end -->"


def sleep_job(seconds: float) -> str:
    return (
        f'echo \'{{"step": 0, "slept": 0}}\' >> "$A3R_METRICS_FILE"; sleep {seconds:.3f}; '
        f'echo \'{{"step": 1, "slept": {seconds:.3f}}}\' >> "$A3R_METRICS_FILE"'
    )


def blueprint(task: str, seconds: float, wall: float = 600.0) -> Blueprint:
    return Blueprint(
        purpose="scheduler benchmark",
        hypothesis="overhead is small",
        task=task,
        seeds=[0],
        budget=Budget(steps=2, wall_time_s=wall),
        metrics=["slept"],
        success_criteria="finishes",
        launch_command=sleep_job(seconds),
    )


def lpt(durations: list[float], slots: int) -> float:
    loads = [0.0] * slots
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(loads, loads[0] + d)
    return max(loads)


def fifo(durations: list[float], slots: int) -> float:
    free = [0.0] * slots
    end = 0.0
    for d in durations:
        t = heapq.heappop(free)
        heapq.heappush(free, t + d)
        end = max(end, t + d)
    return end


def start_monitor(ws: Workspace) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "a3r", "--workspace", str(ws.root), "monitor"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def makespan(ws: Workspace, n: int, slots: int, lo: float, hi: float, seed: int) -> dict:
    rng = random.Random(seed)
    durations = [round(rng.uniform(lo, hi), 2) for _ in range(n)]
    stage = ws.create_stage(ws.create_campaign("bench").id, "makespan")
    runs = ws.add_blueprints(stage.id, [blueprint(f"job{i}", d) for i, d in enumerate(durations)])
    ids = [r.id for r in runs]
    t0 = time.time()
    mon = start_monitor(ws)
    try:
        ws.wait(ids, timeout=30 * (sum(durations) / slots + hi), poll_s=0.2)
        t_done = max(ws.run(i).ended_at for i in ids)
    finally:
        mon.send_signal(signal.SIGTERM)
        mon.wait(timeout=30)
    atts = [a for i in ids for a in ws.attempts(i)]
    assert all(ws.run(i).state == "succeeded" for i in ids) and len(atts) == n, "every run once"
    first = min(a.dispatched_at for a in atts)
    last = max(a.ended_at for a in atts)
    startup = [a.started_at - a.dispatched_at for a in atts]
    by_slot: dict[str, list] = {}
    for a in atts:
        by_slot.setdefault(a.slot, []).append(a)
    turnaround = []
    for seq in by_slot.values():
        seq.sort(key=lambda a: a.dispatched_at)
        turnaround += [b.dispatched_at - a.ended_at for a, b in zip(seq, seq[1:], strict=False)]
    lb = max(sum(durations) / slots, max(durations))
    return {
        "runs": n,
        "slots": slots,
        "durations_s": [lo, hi],
        "sum_s": round(sum(durations), 1),
        "lower_bound_s": round(lb, 2),
        "lpt_s": round(lpt(durations, slots), 2),
        "fifo_ideal_s": round(fifo(durations, slots), 2),
        "measured_s": round(last - first, 2),
        "measured_incl_monitor_start_s": round(t_done - t0, 2),
        "worker_startup_mean_s": round(statistics.mean(startup), 3),
        "worker_startup_p95_s": round(sorted(startup)[int(0.95 * (len(startup) - 1))], 3),
        "slot_turnaround_mean_s": round(statistics.mean(turnaround), 3) if turnaround else None,
    }


def kill_latency(ws: Workspace, trials: int, how: str) -> dict:
    stage = ws.create_stage(ws.create_campaign("bench").id, f"kill-{how}")
    mon = start_monitor(ws)
    detect, restart = [], []
    try:
        for k in range(trials):
            (run,) = ws.add_blueprints(stage.id, [blueprint(f"kill-{how}-{k}", 120.0)])
            deadline = time.monotonic() + 60
            while not (ws.attempts(run.id) and ws.attempts(run.id)[0].started_at):
                if time.monotonic() > deadline:
                    raise RuntimeError("run did not start")
                time.sleep(0.02)
            time.sleep(0.5)  # let it settle into steady heartbeats
            a = ws.attempts(run.id)[0]
            t_kill = time.time()
            if how == "sigkill-worker":
                os.kill(a.worker_pid, signal.SIGKILL)
            elif how == "kill-pane":
                subprocess.run(
                    ["tmux", "-L", ws.hosts["local"].socket, "kill-pane", "-t", a.session], check=True
                )
            # hung-worker: the worker hangs by itself after its first heartbeat; the fault is timed
            # from the last heartbeat the store saw (read below, once the attempt is closed)
            while True:
                atts = ws.attempts(run.id)
                if len(atts) == 2 and atts[1].started_at:
                    break
                if time.monotonic() > deadline + 60:
                    raise RuntimeError("no restart")
                time.sleep(0.01)
            lost = ws.store.get_attempt(a.id)
            assert lost.state in ("stale", "failed") and lost.failure_kind == "infrastructure", lost
            if how == "hung-worker":
                t_kill = lost.heartbeat_at
            detect.append(lost.ended_at - t_kill)
            restart.append(atts[1].started_at - t_kill)
            ws.cancel([run.id])
    finally:
        mon.send_signal(signal.SIGTERM)
        mon.wait(timeout=30)
    return {
        "how": how,
        "trials": trials,
        "detect_median_s": round(statistics.median(detect), 3),
        "detect_max_s": round(max(detect), 3),
        "restart_median_s": round(statistics.median(restart), 3),
        "restart_max_s": round(max(restart), 3),
    }


def render(res: dict) -> str:
    m, cfg = res["makespan"], res["config"]
    lines = [
        BEGIN,
        f"Measured {res['date']} on a {res['machine']} (load average at start {res['load_at_start']}), with",
        f"`{res['command']}`.",
        f"Settings: heartbeat {cfg['heartbeat_s']} s (stale after {cfg['stale_after_s']} s), monitor tick {cfg['tick_s']} s, "
        f"retry backoff {cfg['backoff_base_s']} s.",
        "",
        f"**Makespan**: {m['runs']} sleep jobs of {m['durations_s'][0]:g}-{m['durations_s'][1]:g} s (sum {m['sum_s']} s) on {m['slots']} local slots.",
        "",
        "| schedule | makespan (s) | vs lower bound |",
        "| --- | --- | --- |",
        f"| lower bound max(sum/{m['slots']}, longest) | {m['lower_bound_s']} | 1.00 |",
        f"| LPT (knows durations) | {m['lpt_s']} | {m['lpt_s'] / m['lower_bound_s']:.2f} |",
        f"| FIFO, zero overhead (submission order) | {m['fifo_ideal_s']} | {m['fifo_ideal_s'] / m['lower_bound_s']:.2f} |",
        f"| **A3R measured** (first dispatch -> last result) | **{m['measured_s']}** | **{m['measured_s'] / m['lower_bound_s']:.2f}** |",
        f"| A3R measured, including monitor start-up | {m['measured_incl_monitor_start_s']} | {m['measured_incl_monitor_start_s'] / m['lower_bound_s']:.2f} |",
        "",
        f"Overhead against zero-overhead FIFO: {m['measured_s'] - m['fifo_ideal_s']:+.1f} s "
        f"({(m['measured_s'] / m['fifo_ideal_s'] - 1) * 100:+.1f}%). Worker start-up (dispatch -> job running) "
        f"mean {m['worker_startup_mean_s']} s, p95 {m['worker_startup_p95_s']} s; slot turnaround (attempt end -> next "
        f"dispatch on that slot) mean {m['slot_turnaround_mean_s']} s.",
        "",
        "**Recovery latency** (fault while running -> attempt declared stale -> retry's job running; a hang is "
        f"timed from the last heartbeat seen, so its detection includes the {cfg['stale_after_s']:g} s silence threshold; "
        "restart includes "
        "the backoff):",
        "",
        "| fault | trials | detection median / max (s) | restart median / max (s) |",
        "| --- | --- | --- | --- |",
    ]
    for k in res["kills"]:
        lines.append(
            f"| {k['how']} | {k['trials']} | {k['detect_median_s']} / {k['detect_max_s']} | {k['restart_median_s']} / {k['restart_max_s']} |"
        )
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--min-s", type=float, default=1.0)
    p.add_argument("--max-s", type=float, default=8.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heartbeat", type=float, default=1.0)
    p.add_argument("--backoff", type=float, default=1.0)
    p.add_argument("--kill-trials", type=int, default=5)
    p.add_argument("--machine", default="2-core CPU container")
    p.add_argument("--workspace", help="default: a temporary directory")
    p.add_argument("--out", help="also write the results as JSON here")
    p.add_argument("--write-docs", action="store_true", help=f"replace the results block in {DOCS}")
    args = p.parse_args()

    sched = SchedulerConfig(
        heartbeat_s=args.heartbeat, backoff_base_s=args.backoff, session_linger_s=0.0, kill_grace_s=1.0
    )
    root = Path(args.workspace or tempfile.mkdtemp(prefix="a3r-bench-"))
    ws = Workspace.create(
        root, WorkspaceConfig(hosts=[HostSpec(name="local", slots=args.slots)], scheduler=sched)
    )
    load_before = loadavg()
    res = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{args.machine} ({os.cpu_count()} CPUs)",
        "load_at_start": " / ".join(f"{x:.1f}" for x in loadavg()),
        "command": " ".join([".venv/bin/python benchmarks/a3r_scheduler.py", *sys.argv[1:]]),
        "config": {
            "heartbeat_s": sched.heartbeat_s,
            "stale_after_s": sched.stale_after,
            "tick_s": sched.tick,
            "backoff_base_s": sched.backoff_base_s,
        },
    }
    # a second workspace whose worker Python hangs every first attempt after one heartbeat
    wrapper = root / "hanging-python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {HANG_HOOK} "$@"\n')
    wrapper.chmod(0o755)
    hung_cfg = WorkspaceConfig(hosts=[HostSpec(name="local", slots=1, python=str(wrapper))], scheduler=sched)
    hung = Workspace.create(root / "hung", hung_cfg)
    try:
        res["makespan"] = makespan(ws, args.runs, args.slots, args.min_s, args.max_s, args.seed)
        res["kills"] = [kill_latency(ws, args.kill_trials, how) for how in ("sigkill-worker", "kill-pane")]
        res["kills"].append(kill_latency(hung, args.kill_trials, "hung-worker"))
    finally:
        ws.shutdown()
        hung.shutdown()
        hung.close()
    res["environment"] = machine_record(load_before)  # versions, threads, load after, commit
    for name, value in res["makespan"].items():
        if isinstance(value, (int, float)):
            ws.store.add_bench_result(
                "a3r_scheduler", f"makespan.{name}", float(value), machine=res["machine"]
            )
    for k in res["kills"]:
        for name in ("detect_median_s", "restart_median_s"):
            ws.store.add_bench_result(
                "a3r_scheduler", f"{k['how']}.{name}", k[name], unit="s", machine=res["machine"]
            )
    block = render(res)
    print(block)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2))
    if args.write_docs:
        text = DOCS.read_text()
        if BEGIN in text and END in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
        else:
            text += "\n" + block + "\n"
        DOCS.write_text(text)
    ws.close()


if __name__ == "__main__":
    main()
