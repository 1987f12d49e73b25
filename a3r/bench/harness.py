"""The job an A3R worker runs for one benchmark attempt: the benchmarked commit's engine, measured.

Run as a script by path (`python /path/to/a3r/bench/harness.py config.yaml`) from the run directory,
with the commit's interpreter and `PYTHONPATH=<commit worktree>`, so `engine` is the commit's own code
while this file comes from the a3r doing the benchmarking. It therefore imports only the standard
library (and pyyaml, a dependency of every engine version), never `a3r`.

What it does:
- `train`: writes the TrainJob (seed from A3R_SEED) to a fresh per-attempt directory and runs
  `python -m engine.cli train` on it. A retried attempt starts from scratch (earlier attempts' directories
  are deleted): a benchmark measures one uninterrupted run, never a resumed one.
- `throughput`: runs `probe_job.py` (next to this file) under the commit's engine.
While the job runs it relays each line the engine appends to its `metrics.jsonl` into A3R's metrics file,
adding the line's arrival time (seconds since the job started) as `bench_step_t_s` (training lines) or
`bench_eval_t_s` (evaluation lines). When the job ends it logs the peak resident memory of the job's
largest process (getrusage of the waited-for children, so the swarm server the job starts is included),
the job's wall time and the load average at start. The job's exit code is the harness's exit code.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Series", "main"]

POLL_S = 0.05  # arrival-time resolution of a metric line; steps take seconds


class Series:
    """Names of the series the engine and this harness log (read by `a3r.bench.metrics`)."""

    REWARD = "reward_mean"
    TOKENS = "tokens"
    EVAL = "eval_accuracy"
    STEP_T = "bench_step_t_s"  # seconds since the job started when a training step's line appeared
    EVAL_T = "bench_eval_t_s"  # same, for an evaluation line
    PEAK_RSS = "bench_peak_rss_mb"
    JOB_WALL = "bench_job_wall_s"
    LOAD = "bench_load_1m"
    CALLS_PER_S = "bench_calls_per_s"
    GEN_TOKENS_PER_S = "bench_gen_tokens_per_s"
    LATENCY_P50 = "bench_latency_p50_ms"


class _Relay:
    """Copies complete lines of the job's metrics file into A3R's, stamped with their arrival time."""

    def __init__(self, src: Path, dest: Path, t0: float) -> None:
        self.src, self.dest, self.t0, self.offset = src, dest, t0, 0
        self.last_step = 0

    def pump(self) -> None:
        try:
            with open(self.src, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        if end == 0:
            return
        self.offset += end
        now = time.monotonic() - self.t0
        out = []
        for raw in data[:end].splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                out.append(raw.decode("utf-8", "replace"))  # A3R's parser counts it as corrupt
                continue
            if isinstance(rec, dict):
                stamp = (
                    Series.STEP_T if Series.REWARD in rec else Series.EVAL_T if Series.EVAL in rec else None
                )
                if stamp is not None:
                    rec[stamp] = now
                if isinstance(rec.get("step"), (int, float)):
                    self.last_step = max(self.last_step, int(rec["step"]))
            out.append(json.dumps(rec))
        _append(self.dest, out)


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _job_command(bench: dict, cfg: dict, work: Path, seed: int) -> list[str]:
    kind = bench["kind"]
    if kind == "train":
        job = cfg["job"]
        job["seed"] = seed
        job.setdefault("swarm", {}).setdefault("model", {})["seed"] = seed
        (work / "job.yaml").write_text(json.dumps(job, indent=2))  # JSON is YAML
        return [
            sys.executable,
            "-m",
            "engine.cli",
            "train",
            "--config",
            str(work / "job.yaml"),
            "--run-dir",
            str(work),
        ]
    if kind == "throughput":
        spec = {**cfg["probe"], "model": cfg["model"], "seed": seed, "out": str(work / "metrics.jsonl")}
        (work / "probe.json").write_text(json.dumps(spec, indent=2))
        return [sys.executable, str(Path(__file__).with_name("probe_job.py")), str(work / "probe.json")]
    raise SystemExit(f"bench harness: unknown benchmark kind {kind!r} in config.yaml")


def main(argv: list[str]) -> int:
    import yaml

    if len(argv) != 2:
        raise SystemExit("usage: harness.py CONFIG.yaml (run by an A3R worker from the run directory)")
    cfg = yaml.safe_load(Path(argv[1]).read_text())
    run_dir = Path(os.environ["A3R_RUN_DIR"])
    attempt = os.environ.get("A3R_ATTEMPT", "1")
    seed = int(os.environ.get("A3R_SEED", "0"))
    for old in run_dir.glob("job-attempt-*"):  # a retry starts from scratch; free the disk
        shutil.rmtree(old, ignore_errors=True)
    work = run_dir / f"job-attempt-{attempt}"
    work.mkdir(parents=True)
    cmd = _job_command(cfg["bench"], cfg, work, seed)
    env = {k: v for k, v in os.environ.items() if k != "A3R_METRICS_FILE"}  # the engine writes to `work`
    dest = Path(os.environ["A3R_METRICS_FILE"])
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    relay = _Relay(work / "metrics.jsonl", dest, t0)
    print(f"bench harness: attempt {attempt}, seed {seed}: {' '.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, env=env)
    while proc.poll() is None:
        relay.pump()
        time.sleep(POLL_S)
    relay.pump()
    wall = time.monotonic() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # Linux: KiB
    summary = {"step": relay.last_step, Series.PEAK_RSS: peak_mb, Series.JOB_WALL: wall, Series.LOAD: load}
    _append(dest, [json.dumps(summary)])
    print(
        f"bench harness: job exited {proc.returncode} after {wall:.1f} s, peak RSS {peak_mb:.0f} MB",
        flush=True,
    )
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
