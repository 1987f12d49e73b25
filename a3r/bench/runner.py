"""`a3r bench run`: measure a suite at some commits, through the A3R scheduler, into the store.

For each commit: a detached git worktree (`<workspace>/bench/checkouts/<sha>`), an environment
(`a3r.bench.checkout`), then per benchmark one blueprint whose seeds become runs. The runs are ordinary
A3R runs (campaign `bench-<suite>`, stage `<sha10>-r<round>`): the scheduler dispatches them to the
workspace's hosts and slots, workers run them in tmux with heartbeats, lost attempts are retried. When a
run succeeds, its succeeded attempt's series become measurements (`a3r.bench.store.record_run`).

Everything is idempotent: a blueprint records (suite, benchmark, commit, round, environment), so running
the same command again finds the same runs and only waits for or collects what is missing, and a
killed `a3r bench run` resumes where it stopped. A round > 0 is a confirming rerun with fresh seeds
(seed + 1000 * round): the same seeds would repeat the same sampling and confirm nothing.

Remote (ssh) hosts run the job with the controller's paths (worktree, environment, harness): they need a
shared filesystem at the same paths. The local host needs nothing more.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from a3r.api import Workspace
from a3r.bench import harness
from a3r.bench.checkout import CommitInfo, Env, EnvMode, checkout, prepare_env
from a3r.bench.metrics import compute_metrics
from a3r.bench.store import Measurement, attempt_series, record_run
from a3r.bench.suite import BenchKind, Benchmark, Suite
from a3r.blueprints import Blueprint, Budget
from a3r.states import RunState
from a3r.store import Run

__all__ = ["BenchPaths", "BenchRunner", "RoundResult", "round_seeds"]

HARNESS = Path(harness.__file__).resolve()
SEED_STRIDE = 1000


def round_seeds(bench: Benchmark, rnd: int) -> list[int]:
    """Seeds of a round: the suite's seeds for round 0, shifted by 1000 per confirming rerun."""
    return [s + SEED_STRIDE * rnd for s in bench.seeds]


@dataclass(frozen=True)
class BenchPaths:
    """Where `a3r bench` keeps its files inside a workspace."""

    root: Path

    @classmethod
    def of(cls, ws: Workspace) -> BenchPaths:
        return cls(ws.root / "bench")

    @property
    def checkouts(self) -> Path:
        return self.root / "checkouts"

    @property
    def envs(self) -> Path:
        return self.root / "envs"

    @property
    def jsonl(self) -> Path:
        return self.root / "results.jsonl"

    @property
    def reports(self) -> Path:
        return self.root / "reports"


@dataclass
class RoundResult:
    """What one `run` call did."""

    runs: list[int] = field(default_factory=list)
    recorded: int = 0  # new measurements
    failed: list[str] = field(default_factory=list)  # "<run name>: <state> <reason>"


class BenchRunner:
    """Runs a suite's benchmarks at commits of `repo` in workspace `ws` (see the module docstring)."""

    def __init__(
        self,
        ws: Workspace,
        suite: Suite,
        repo: Path,
        *,
        env_mode: EnvMode = EnvMode.CURRENT,
        say: Callable[[str], None] = print,
    ) -> None:
        self.ws, self.suite, self.repo, self.env_mode, self.say = ws, suite, repo, env_mode, say
        self.paths = BenchPaths.of(ws)
        self._envs: dict[str, tuple[Path, Env]] = {}

    # -- preparing -----------------------------------------------------------------------------------
    def prepare(self, commit: CommitInfo) -> tuple[Path, Env]:
        """The commit's worktree and environment (cached for this runner's life)."""
        if commit.sha not in self._envs:
            tree = checkout(self.repo, commit.sha, self.paths.checkouts)
            env = prepare_env(self.env_mode, self.repo, commit.sha, tree, self.paths.envs)
            self._envs[commit.sha] = (tree, env)
        return self._envs[commit.sha]

    def blueprint(self, bench: Benchmark, commit: CommitInfo, rnd: int, tree: Path, env: Env) -> Blueprint:
        """The blueprint of one benchmark at one commit and round (its seeds are the runs)."""
        meta = {
            "kind": bench.kind.value,
            "suite": self.suite.name,
            "benchmark": bench.name,
            "commit": commit.sha,
            "commit_time": commit.time,
            "subject": commit.subject,
            "round": rnd,
            "env": env.key,
            "versions": env.versions,
        }
        if bench.kind is BenchKind.TRAIN:
            cfg = {"bench": meta, "job": bench.train_job(0)}  # the harness sets each run's seed
            primary = harness.Series.REWARD
        else:
            cfg = {"bench": meta, "probe": bench.probe.model_dump(), "model": bench.model}
            primary = harness.Series.CALLS_PER_S
        launch = (
            f"PYTHONPATH={shlex.quote(str(tree))} OMP_WAIT_POLICY=PASSIVE "
            f"exec {shlex.quote(env.python)} {shlex.quote(str(HARNESS))} config.yaml"
        )
        return Blueprint(
            purpose=f"regression benchmark {bench.name} of suite {self.suite.name} at {commit.short} "
            f"({commit.subject[:80]}), round {rnd}",
            hypothesis="the commit performs like its baseline within each metric's minimum effect",
            engine_config=cfg,
            task=bench.task if bench.kind is BenchKind.TRAIN else "throughput",
            seeds=round_seeds(bench, rnd),
            budget=Budget(steps=bench.steps, wall_time_s=bench.wall_time_s),
            metrics=[primary],
            success_criteria="compared by a3r bench compare/check",
            launch_command=launch,
            name=f"{bench.name}@{commit.short}" + (f"-r{rnd}" if rnd else ""),
        )

    def submit(
        self, commits: Sequence[CommitInfo], *, benchmarks: Sequence[str] | None = None, rnd: int = 0
    ) -> list[Run]:
        """Add (or find) the runs of the chosen benchmarks at every commit; nothing waits here."""
        chosen = [self.suite.benchmark(n) for n in benchmarks] if benchmarks else list(self.suite.benchmarks)
        camp = self.ws.create_campaign(f"bench-{self.suite.name}", goal=f"regression suite {self.suite.name}")
        runs: list[Run] = []
        for commit in commits:
            tree, env = self.prepare(commit)
            stage = self.ws.create_stage(camp.id, f"{commit.short}-r{rnd}", purpose=commit.subject)
            runs += self.ws.add_blueprints(
                stage.id, [self.blueprint(b, commit, rnd, tree, env) for b in chosen]
            )
        return runs

    # -- waiting and collecting ----------------------------------------------------------------------
    def wait(self, run_ids: Sequence[int], *, timeout: float | None = None) -> dict[int, RunState]:
        """Until every run is terminal: through the workspace's monitor if one runs, else by ticking the
        scheduler in this process (the same scheduler, the same retries)."""
        holder = self.ws.monitor_pid()
        drive = holder is None or holder == os.getpid()  # our own lease comes from earlier polls
        return self.ws.wait(run_ids, timeout=timeout, drive=drive)

    def collect(self, runs: Sequence[Run]) -> RoundResult:
        """Record the measurements of the succeeded runs (idempotent); list the others as failures."""
        out = RoundResult(runs=[r.id for r in runs])
        for run in runs:
            run = self.ws.run(run.id)
            if run.state != RunState.SUCCEEDED:
                out.failed.append(f"{run.name}: {run.state} {run.message}".strip())
                continue
            out.recorded += record_run(self.ws.store, self.measurements_of(run), self.paths.jsonl)
        return out

    def measurements_of(self, run: Run) -> list[Measurement]:
        """A succeeded run's metric values, computed from its succeeded attempt only."""
        bp = self.ws.store.blueprint_of(run)
        meta = bp.engine_config["bench"]
        bench = self.suite.benchmark(meta["benchmark"])
        attempt = next(a for a in self.ws.attempts(run.id) if a.state == "succeeded")
        series = attempt_series(self.ws.store, attempt.id)
        values = compute_metrics(bench.metrics, series)
        extra = {
            "load_1m": _last(series, harness.Series.LOAD),
            "job_wall_s": _last(series, harness.Series.JOB_WALL),
            "env": meta["env"],
            "attempt": attempt.number,
        }
        now = time.time()
        return [
            Measurement(
                suite=self.suite.name,
                benchmark=bench.name,
                metric=m.name,
                value=values[m.name],
                unit=m.unit,
                direction=m.direction.value,
                commit=meta["commit"],
                commit_time=meta["commit_time"],
                subject=meta["subject"],
                round=meta["round"],
                seed=run.seed,
                host=attempt.host,
                versions=meta["versions"],
                run_id=run.id,
                attempt_id=attempt.id,
                ts=now,
                data=extra,
            )
            for m in bench.metrics
        ]

    def run(
        self,
        commits: Sequence[CommitInfo],
        *,
        benchmarks: Sequence[str] | None = None,
        rnd: int = 0,
        timeout: float | None = None,
    ) -> RoundResult:
        """Submit, wait and collect: the whole of `a3r bench run` for one round."""
        runs = self.submit(commits, benchmarks=benchmarks, rnd=rnd)
        self.say(f"{len(runs)} runs at {len(commits)} commit(s), round {rnd}; waiting")
        self.wait([r.id for r in runs], timeout=timeout)
        res = self.collect(runs)
        self.say(f"{res.recorded} new measurements; {len(res.failed)} run(s) failed")
        for f in res.failed:
            self.say(f"  failed: {f}")
        return res


def _last(series: dict, name: str) -> float | None:
    vals = [v for _, v in series.get(name, ()) if v is not None]
    return vals[-1] if vals else None
