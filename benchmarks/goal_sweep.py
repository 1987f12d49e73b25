"""The truth of an A3R goal by brute force: every arm the goal names, N seeds each, analysed like the campaign.

`a3r research "<goal>"` answers a question in stages (calibration, grid, refinements, a confirmation on
fresh seeds) within a budget. This script answers the same question without stages: it runs every value
the campaign's first grid would test (`a3r.leader.design.grid(goal.factor, budget.grid_points)`: a named
set exactly as named, a range at `grid_points` values; crossed with the secondary variable's levels when
the goal has one) with every seed, and decides once on all the runs with the project's own
analysis (`a3r.analysis.analyse`, the campaign's `Question` at one look). Minimum/maximum, best, compare
and effect goals all go through the same code; what differs is read off the analysis per level.

The engine jobs are the leader's own (`a3r.leader.blueprints.train_job` over `DEFAULT_BASE_JOB` with the
`--set` settings applied exactly as `a3r research --set` applies them), at the steps the campaign would run
(the goal's own, else the budget's), and each run's seed is set at the top-level `seed` key, as the
leader's blueprints do (`seed_path="seed"`). The sweep has no calibration stage, so the reference gain of a
relative criterion is the reference arm's own seeds. Arms are compared unpaired (Welch), as a campaign
does unless its exploration shows pairing narrows the intervals.

What it does not do: refine. A campaign over a range may add values between the grid's; the sweep only
knows the grid, and its comparison says so when the campaign's answer is a value the sweep did not run.

Runs go several at once, as A3R runs them on a CPU host: `--slots N` runs at most N at a time, each in a
child process (`goal_sweep.py --child <run dir>`) with cores // N CPU threads (OMP_NUM_THREADS /
MKL_NUM_THREADS, as `a3r.config.SlotSpec` sets them; `benchmarks.common.run_in_slots`). The default is the
host A3R's `local_host()` gives a new campaign here: one 1-thread slot per core on a CPU host (two 1-thread
runs did 1.27x the runs per hour of one 2-thread run on the 2-core container, docs/benchmarks/run_cost.md),
one all-cores slot on a GPU host; `--slots 1` is one run at a time with all cores, as sweeps ran before
slots. A failed run does not stop the others: the sweep ends with a message naming every failed run and
its logs, and the same command resumes it.

Each run lives in `<runs>/<arm>-seed<seed>/` (the engine's `metrics.jsonl`, `summary.json`, the child's
`sweep_child.log`, and this script's `sweep_run.json`: the job it ran, its slot's thread count, and its
wall time). A run whose `summary.json` exists is reused, after checking it ran the job planned now,
whatever thread count it ran at; an unfinished run dir is cleared and run again, so an interrupted sweep
resumes by running the same command. A run's thread count changes its speed, not its job, so runs of
different thread counts are analysed together; each JSON row records `threads` (the slot's; None: all
cores) and `torch_threads` (what its server computed with), and the Markdown says when the runs mix thread
counts, whose wall times then do not compare. `--dry-run` prints the arms, the jobs, the runs, each run's
seconds at the slots' thread count from the leader's cost model (`a3r.leader.costs.run_seconds`) and the
wall on the slots (`a3r.leader.costs.schedule_seconds`), and runs nothing.

    .venv/bin/python benchmarks/goal_sweep.py "Does batch size 2 or 8 train arithmetic better in 8 steps?" \\
        --set swarm.training.lr=1e-5 --seeds 0 1 2 3 4 5 --slots 2 --out docs/benchmarks/goal_compare_bs

Compare with a finished campaign of the same goal (its report JSON; finished runs are reused):

    ... --campaign-report reports/<campaign>/report.json

Or with the sweep's committed JSON instead of its run dirs (a new checkout has none): `--from-json
docs/benchmarks/<sweep>.json` takes each run's step-0 and final score from the JSON's `runs` and analyses
them with the same code as a fresh sweep, after checking that the JSON's config is the one these arguments
plan (goal, settings, budget, steps, arms, seeds, question and jobs; anything else is refused). Its outputs
keep the sweep's command, runs, times and machine, and go to the JSON's own path unless `--out` is given.

The page names the steps the runs train (each arm's own count when the goal studies the steps); its figure
shows each run's step-0 and final score and each arm's interval on the scale its label is read from, with,
for a threshold, the criterion and the fail margin (`fail_margins`: the analysis's fraction of the reference
arm's gain, below which an arm is shown not to train; recorded in the JSON as `fail_margin`).

A campaign's answer matches the sweep's when both name the same value, or when the campaign cannot tell
and neither can the sweep (its intervals include the tie).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis import Evidence, Interval, LevelEvidence, Question, RunObs, analyse, fmt  # noqa: E402
from a3r.blueprints import deep_merge  # noqa: E402
from a3r.leader.blueprints import train_job  # noqa: E402
from a3r.leader.cli_commands import _base_job, _budget_overrides  # noqa: E402
from a3r.leader.costs import run_seconds, schedule_seconds  # noqa: E402
from a3r.leader.design import STEPS_KEY, Arm, ResearchBudget, arm_label, grid  # noqa: E402
from a3r.leader.goals import Goal, parse_goal  # noqa: E402
from a3r.leader.knobs import set_dotted  # noqa: E402
from a3r.report import eval_items_of, question_of  # noqa: E402
from a3r.worker.metrics import parse_metric_bytes  # noqa: E402
from benchmarks.common import SlotJob, host_slots, loadavg, machine_record, run_in_slots  # noqa: E402
from engine.errors import SwarmError  # noqa: E402
from engine.jobs import TrainJob  # noqa: E402
from engine.launch import train  # noqa: E402

SEED_PATH = "seed"  # where the leader's blueprints put each run's seed (stage_blueprints: seed_path="seed")
RUN_RECORD = "sweep_run.json"
THRESHOLD_SHAPES = ("minimum", "maximum")


class RunFailed(SystemExit):
    """A run of the sweep failed: the message says which, where its logs are and how to resume."""


@dataclass(frozen=True)
class PlannedRun:
    x: Any
    seed: int
    label: str
    job: dict[str, Any]
    run_dir: Path
    level: Any = None  # the secondary variable's value, None without one

    @property
    def done(self) -> bool:
        return (self.run_dir / "summary.json").exists()


@dataclass(frozen=True)
class Preset:
    """A fixed question with its own defaults (`benchmarks/demo_sweep.py` is the demo's)."""

    goal: str
    settings: tuple[str, ...] = ()
    budget: dict[str, Any] = field(default_factory=dict)
    out: str = "docs/benchmarks/goal_sweep"
    runs: str = "runs/goal_sweep"
    script: str = "benchmarks/goal_sweep.py"
    report_hint: str = "reports/<campaign>/report.json"


# -- the jobs, built like the campaign's ----------------------------------------------------------------
def base_job(settings: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """The leader's base job with KEY=VALUE settings applied as `a3r research --set` applies them (the same
    function: values parsed alike, and an invalid job refused with the same message)."""
    return _base_job(argparse.Namespace(model=None, set=list(settings)))


def research_budget(preset: dict[str, Any], overrides: list[str]) -> ResearchBudget:
    """The campaign's budget: `a3r research`'s defaults (ResearchBudget's), the preset's fields, then
    `--budget KEY=VALUE` items as `a3r research --budget` reads them."""
    return ResearchBudget(**{**preset, **_budget_overrides(overrides)})


def with_seed(job: dict[str, Any], seed: int) -> dict[str, Any]:
    """A copy of `job` with `seed` at SEED_PATH (what `Blueprint.effective_config(seed)` does)."""
    out = deep_merge(job, {})
    set_dotted(out, SEED_PATH, seed)
    return out


def sweep_arms(goal: Goal, budget: ResearchBudget) -> list[tuple[Any, Any]]:
    """(level, x) of every arm: the campaign's first grid of the studied variable, at every level of the
    secondary variable (None without one), level-major as the leader orders them."""
    levels = [None] if goal.secondary is None else grid(goal.secondary, budget.secondary_levels)
    return [(lv, x) for lv in levels for x in grid(goal.factor, budget.grid_points)]


def run_dir_name(label: str, seed: int) -> str:
    """`bs=2` seed 0 -> `bs2-seed0`; characters a path should not hold become `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label.replace("=", "")) + f"-seed{seed}"


def plan(
    goal: Goal,
    base: dict[str, Any],
    steps: int,
    seeds: list[int],
    runs_root: Path,
    budget: ResearchBudget | None = None,
) -> list[PlannedRun]:
    """Every (arm, seed) run, seed-major so that an interrupted sweep has every arm equally seeded."""
    arms = sweep_arms(goal, budget or ResearchBudget())
    jobs = {
        (lv, x): train_job(goal, Arm(x=x, level=lv, seeds=seeds, why="sweep"), steps, base) for lv, x in arms
    }
    out = []
    for seed in seeds:
        for lv, x in arms:
            label = arm_label(goal, x, lv)
            job = with_seed(jobs[(lv, x)], seed)
            out.append(PlannedRun(x, seed, label, job, runs_root / run_dir_name(label, seed), lv))
    return out


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def split_settings(
    jobs: list[dict[str, Any]], defaults: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Dotted settings of the jobs (seed left out): those equal in every job and not at the default, and
    for each job the values of the settings that vary between the jobs."""
    flat = [{k: v for k, v in flatten(j).items() if k != SEED_PATH} for j in jobs]
    d = flatten(defaults)
    varying = [k for k in flat[0] if any(f.get(k) != flat[0][k] for f in flat)]
    common = {k: v for k, v in flat[0].items() if k not in varying and d.get(k, object()) != v}
    return common, [{k: f.get(k) for k in varying} for f in flat]


def expected_seconds(runs: list[PlannedRun], threads: int | None = None) -> dict[str, float | None]:
    """The leader's prior cost (`run_seconds`, each run in a slot of `threads` threads; None: all cores) of
    every run and of those still to run; None without a prior for the model."""
    per = [run_seconds(r.job, int(r.job["swarm"]["training"]["max_steps"]), threads) for r in runs]
    if any(s is None for s in per):
        return {"all_s": None, "to_run_s": None}
    return {"all_s": sum(per), "to_run_s": sum(s for s, r in zip(per, runs, strict=True) if not r.done)}


def expected_wall(runs: list[PlannedRun], slots: int, threads: int | None) -> float | None:
    """The leader's prior wall seconds of the runs still to run on `slots` slots of `threads` threads, in
    the plan's order as slots come free (`a3r.leader.costs.schedule_seconds`); None without a prior."""
    per = [run_seconds(r.job, int(r.job["swarm"]["training"]["max_steps"]), threads) for r in runs if not r.done]
    return None if any(s is None for s in per) else schedule_seconds(per, slots)


# -- running ----------------------------------------------------------------------------------------------
def read_record(run: PlannedRun) -> dict[str, Any]:
    path = run.run_dir / RUN_RECORD
    return json.loads(path.read_text()) if path.exists() else {}


def _effective(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job with the engine's current defaults filled in: a field the engine added since the run was
    recorded (at its default) is the same job, not another one."""
    return None if job is None else TrainJob.model_validate(job).model_dump(mode="json")


def check_reusable(run: PlannedRun) -> None:
    """A finished run must have run the job planned now (else SystemExit saying so)."""
    if _effective(read_record(run).get("job")) != _effective(run.job):
        raise SystemExit(
            f"{run.run_dir} holds a finished run of another job than the one planned now (the settings "
            "changed?); delete it or pass another --runs"
        )


def prepare(run: PlannedRun, threads: int | None) -> None:
    """Clear an unfinished run's dir (its partial metrics would mix in) and record the job it will run and
    the CPU threads of its slot (None: the libraries' default, all cores)."""
    shutil.rmtree(run.run_dir, ignore_errors=True)
    run.run_dir.mkdir(parents=True)
    record = {"label": run.label, "seed": run.seed, "job": run.job, "threads": threads, "wall_s": None}
    (run.run_dir / RUN_RECORD).write_text(json.dumps(record, indent=2))


def train_prepared(run_dir: Path) -> float:
    """Train the run `prepare` recorded in `run_dir`, in this process; its wall seconds, recorded with when
    it started and ended. A failure is RunFailed naming the run, its logs and the resume."""
    path = run_dir / RUN_RECORD
    record = json.loads(path.read_text())
    record["started_at"] = time.time()
    t0 = time.perf_counter()
    try:
        train(TrainJob.model_validate(record["job"]), run_dir)
    except (SwarmError, OSError, httpx.HTTPError) as e:  # OSError holds the /health TimeoutError
        record["error"] = (
            f"{record['label']} seed {record['seed']} failed ({type(e).__name__}: {e}); its logs are in "
            f"{run_dir}. Run the same command again: finished runs are reused and this one starts over."
        )
        path.write_text(json.dumps(record, indent=2))  # the parent of a child run reads it from here
        raise RunFailed(record["error"]) from e
    record["wall_s"] = time.perf_counter() - t0
    record["finished_at"] = time.time()
    path.write_text(json.dumps(record, indent=2))
    return record["wall_s"]


def execute(run: PlannedRun, threads: int | None = None) -> float | None:
    """Run it in this process unless finished (then check that it ran this job); the run's wall seconds.
    `threads` is only recorded: this process's thread count is what it is."""
    if run.done:
        check_reusable(run)
        return read_record(run).get("wall_s")
    prepare(run, threads)
    return train_prepared(run.run_dir)


CHILD_LOG = "sweep_child.log"


def execute_all(runs: list[PlannedRun], slots: int, threads: int | None) -> list[float | None]:
    """Every run, finished ones reused (after `check_reusable`), the others each in a child process
    (`--child`), at most `slots` at once with `threads` CPU threads each (`benchmarks.common.run_in_slots`,
    as an A3R slot runs them); the runs' wall seconds in order. A failed run does not stop the others:
    once all have ended, RunFailed names every failed run and its logs."""
    to_run = []
    for k, r in enumerate(runs, start=1):
        if r.done:
            check_reusable(r)
            print(f"[{k}/{len(runs)}] {r.label} seed {r.seed}: reused", flush=True)
        else:
            to_run.append(r)
    for r in to_run:
        prepare(r, threads)
    jobs = [
        SlotJob(
            f"{r.label} seed {r.seed}",
            [sys.executable, str(Path(__file__).resolve()), "--child", str(r.run_dir)],
            r.run_dir / CHILD_LOG,
        )
        for r in to_run
    ]
    if jobs:
        print(f"training {len(jobs)} run(s), {slots} at a time, {threads or 'all'} thread(s) each", flush=True)
    failed = [
        read_record(r).get("error")
        or f"{res.job.name} failed (exit {res.returncode}): {res.log_tail(1000)}\nits logs are in {r.run_dir}"
        for r, res in zip(to_run, run_in_slots(jobs, slots, threads), strict=True)
        if not res.ok
    ]
    if failed:
        raise RunFailed(
            "\n".join(failed) + f"\n{len(failed)} of {len(runs)} runs failed; the others finished and are kept."
        )
    return [read_record(r).get("wall_s") for r in runs]


# -- analysis -----------------------------------------------------------------------------------------------
def series_from_bytes(data: bytes, metric: str) -> tuple[tuple[int, float | None], ...]:
    """(step, value) of `metric` in a metrics.jsonl, parsed as the A3R worker parses it; the first value
    of a repeated step wins, as in the store."""
    out: dict[int, float | None] = {}
    for step, name, value in parse_metric_bytes(data, final=True).points:
        if name == metric:
            out.setdefault(step, value)
    return tuple(sorted(out.items()))


def observations(runs: list[PlannedRun], metric: str) -> list[RunObs]:
    return [
        RunObs(
            run_id=i,
            stage=1,
            seed=r.seed,
            x=r.x,
            level=r.level,
            label=r.label,
            state="succeeded",
            series=series_from_bytes((r.run_dir / "metrics.jsonl").read_bytes(), metric),
        )
        for i, r in enumerate(runs, start=1)
    ]


def observations_from_rows(runs: list[PlannedRun], rows: list[dict[str, Any]], q: Question) -> list[RunObs]:
    """The runs as `observations` reads them, from a committed sweep JSON's `runs` rows (in the plan's order,
    as `run_rows` wrote them): each curve is its step-0 value and its final value, which is all that the
    statistics `final` and `initial` read. `auc` needs the whole curve, which the JSON does not hold."""
    if q.statistic not in ("final", "initial"):
        raise ValueError(
            f"the JSON holds each run's first and last value, not the curve {q.statistic!r} needs"
        )
    out = []
    for i, (r, row) in enumerate(zip(runs, rows, strict=True), start=1):
        series: tuple[tuple[int, float | None], ...] = ()
        if "final" in row:  # a run without a score was written without one, and stays so
            last = int(row["last_step"])
            series = ((0, row["step0"]), (last, row["final"])) if last > 0 else ((0, row["final"]),)
        obs = RunObs(i, 1, r.seed, r.x, r.level, r.label, "succeeded", series)
        out.append(obs)
    return out


def sweep_config(
    title: str,
    text: str,
    goal: Goal,
    settings: list[str],
    budget: ResearchBudget,
    steps: int,
    runs: list[PlannedRun],
    q: Question,
) -> dict[str, Any]:
    """The sweep's `config` record: what was asked and the jobs that answer it."""
    return {
        "title": title,
        "goal": text,
        "variable": goal.factor.name,
        "settings": settings,
        "budget": budget.model_dump(mode="json"),
        "steps": steps,
        "grid": list(dict.fromkeys(r.x for r in runs)),  # in the plan's (grid) order
        "levels": list(dict.fromkeys(r.level for r in runs)),
        "seeds": sorted({r.seed for r in runs}),
        "question": {**asdict(q), "level": q.level},
        "criterion": goal.criterion.describe(goal.metric),
        "jobs": {r.label: {k: v for k, v in r.job.items() if k != SEED_PATH} for r in runs},
    }


def config_mismatch(committed: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """Keys of the config on which a committed sweep differs from the one planned now (the title is
    presentation and left out). Jobs compare with the engine's current defaults filled in, as a reused run
    dir's job does; everything else as its JSON."""

    def norm(key: str, value: Any) -> Any:
        if key == "jobs" and isinstance(value, dict):
            return {label: _effective(job) for label, job in value.items()}
        return json.loads(json.dumps(value, default=str))

    keys = (set(committed) | set(planned)) - {"title"}
    question = committed.get("question")
    if isinstance(question, dict) and isinstance(planned.get("question"), dict):
        # Question fields that only word its sentences, added after a sweep was committed, cannot have
        # differed when it ran: compared only when the committed record has them
        unrecorded = _QUESTION_WORDING - set(question)
        planned = {**planned, "question": {k: v for k, v in planned["question"].items() if k not in unrecorded}}
    return sorted(k for k in keys if norm(k, committed.get(k)) != norm(k, planned.get(k)))


# `Question.values`: the values the goal names, used only to name untested ones in a verdict's sentence
_QUESTION_WORDING = frozenset({"values"})


def read_committed(path: Path, config: dict[str, Any], runs: list[PlannedRun]) -> dict[str, Any]:
    """A committed sweep JSON whose config and runs are exactly those planned now; else ValueError saying
    what differs."""
    data = json.loads(path.read_text())
    differ = config_mismatch(data.get("config", {}), config)
    if differ:
        raise ValueError(
            f"{path} is a sweep of another config ({', '.join(differ)} differ from these arguments; "
            f"it ran: {data.get('command')})"
        )
    ran = [(row.get("arm"), row.get("seed")) for row in data.get("runs", [])]
    if ran != [(r.label, r.seed) for r in runs]:
        raise ValueError(f"{path} holds other runs than the {len(runs)} planned (arm, seed) runs")
    return data


def sweep_question(goal: Goal, budget: ResearchBudget, base: dict[str, Any]) -> Question:
    """The campaign's question (criterion, alpha, min_seeds, eval noise floor) decided at a single look."""
    return replace(question_of(goal, budget, eval_items_of(base)), looks=1)


def level_answer(le: LevelEvidence) -> dict[str, Any]:
    """One level's answer as data: `value` is the answer only when it is conclusive (else None: cannot
    tell); `leader` is what the answer would be (the best arm, the threshold's candidate, the compared
    winner or the higher-scoring side) whether or not the runs separate it."""
    value, leader = None, None
    if le.threshold is not None:
        th = le.threshold
        leader = th.answer.x if th.answer is not None else None
        value = leader if th.conclusive else None
    elif le.compare is not None:
        c = le.compare
        leader = c.winner.x if c.winner else (c.a if c.diff.mean >= 0 else c.b).x
        value = c.winner.x if c.winner else None
    elif le.effect is not None:
        leader = le.effect.direction
        value = leader if le.effect.conclusive else None
    elif le.best is not None and le.best.best is not None:
        leader = le.best.best.x
        value = leader if le.best.conclusive else None
    return {
        "level": le.level,
        "value": value,
        "leader": leader,
        "conclusive": le.conclusive,
        "verdict": le.verdict,
    }


def arm_status(le: LevelEvidence) -> dict[str, str]:
    """Arm label -> its label in the answer: pass/fail/uncertain (threshold), best/tied/dominated (best),
    winner/tie (compare); '' where the shape labels none."""
    if le.threshold is not None:
        return dict(le.threshold.status)
    if le.compare is not None:
        c = le.compare
        if c.winner is None:
            return {c.a.label: "tie", c.b.label: "tie"}
        loser = c.b if c.winner is c.a else c.a
        return {c.winner.label: "better", loser.label: "worse"}
    if le.best is not None and le.best.best is not None:
        b = le.best
        return {
            b.best.label: "best",
            **{a.label: "tied" for a in b.tied},
            **{a.label: "dominated" for a in b.dominated},
        }
    return {}


def arm_test(le: LevelEvidence, label: str) -> Interval | None:
    """The interval the arm's label was read from: its test against the criterion (threshold), the best's
    lead over it (best), the difference a - b (compare)."""
    if le.threshold is not None:
        return le.threshold.tests.get(label)
    if le.compare is not None:
        return le.compare.diff
    if le.best is not None:
        return le.best.diffs.get(label)
    return None


def run_rows(runs: list[PlannedRun], obs: list[RunObs], q: Question, walls: list[float | None]) -> list[dict]:
    rows = []
    for r, o, wall in zip(runs, obs, walls, strict=True):
        s = o.score()
        row = {
            "arm": r.label,
            "x": r.x,
            "level": r.level,
            "seed": r.seed,
            "run_dir": str(r.run_dir),
            "wall_s": wall,
            **run_threads(r),
        }
        if s is not None:
            score = s.get(q.statistic)
            row |= {"step0": s.initial, "final": score, "gain": score - s.initial, "last_step": s.last_step}
        rows.append(row)
    return rows


def run_span_s(runs: list[PlannedRun]) -> float | None:
    """Seconds from the first run's start to the last run's end, from the runs' own records: the sweep's
    wall even when a later invocation only reused them (None when a run lacks its times: made before they
    were recorded). A sweep resumed after a pause counts the pause."""
    times = [read_record(r) for r in runs]
    starts = [t.get("started_at") for t in times]
    ends = [t.get("finished_at") for t in times]
    if not times or None in starts or None in ends:
        return None
    return max(ends) - min(starts)


def run_threads(run: PlannedRun) -> dict[str, int | None]:
    """The CPU threads a run was given (its slot's, from its record; None: all cores, as every run was
    before slots) and those its server computed with (`torch_threads` of its summary.json)."""
    summary = run.run_dir / "summary.json"
    torch_threads = json.loads(summary.read_text()).get("torch_threads") if summary.exists() else None
    return {"threads": read_record(run).get("threads"), "torch_threads": torch_threads}


def thread_counts(rows: list[dict[str, Any]]) -> list[Any]:
    """The distinct thread counts the runs computed with (the server's, else the slot's; None where a row
    records neither, as in a sweep made before slots)."""
    return sorted({r.get("torch_threads") or r.get("threads") for r in rows}, key=str)


def arm_rows(ev: Evidence) -> list[dict]:
    rows = []
    for le in ev.levels:
        status = arm_status(le)
        for a in le.arms:
            test = arm_test(le, a.label)
            rows.append(
                {
                    "arm": a.label,
                    "x": a.x,
                    "level": a.level,
                    "n": a.n,
                    "score": a.interval.as_dict(),
                    "step0_mean": a.initial,
                    "gain": a.gain_interval.as_dict() if a.gain_interval else None,
                    "trained": a.trained,
                    "status": status.get(a.label, ""),
                    "test": test.as_dict() if test is not None else None,
                }
            )
    return rows


def criteria(ev: Evidence) -> list[dict[str, Any]]:
    """The threshold criterion on the gain scale per level of the second variable (empty for other shapes).
    The level is `secondary_level`: the interval's own `level` is its confidence and would overwrite it."""
    return [
        {"secondary_level": le.level, **le.threshold.criterion.as_dict()}
        for le in ev.levels
        if le.threshold is not None
    ]


def fail_margins(ev: Evidence) -> list[dict[str, Any]]:
    """Per level of a threshold with a relative criterion, the fail margin on the gain scale: an arm fails
    when its gain is shown below `fraction` of the reference arm's gain, i.e. below `gain` (the analysis's
    own `ThresholdResult.margin` and `fail_gain`). Empty for other shapes and absolute criteria."""
    return [
        {
            "secondary_level": le.level,
            "fraction": le.threshold.margin,
            "reference": le.threshold.reference.label,
            "gain": le.threshold.fail_gain,
        }
        for le in ev.levels
        if le.threshold is not None and le.threshold.fail_gain is not None
    ]


# -- the campaign's answer ----------------------------------------------------------------------------------
def campaign_answers(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per level, the campaign's answer from its report JSON (`a3r.report.render.report_summary`): the
    value only when that level is conclusive and the campaign as a whole is (a campaign still waiting for
    its confirmation is not), else None (cannot tell)."""
    whole = bool(report.get("conclusive", False))
    out = []
    for le in report.get("levels", []):
        conclusive = bool(le.get("conclusive")) and whole
        out.append(
            {
                "level": le.get("level"),
                "value": le.get("answer") if conclusive else None,
                "conclusive": conclusive,
                "verdict": le.get("verdict", ""),
            }
        )
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def agreement(sweep: dict[str, Any], campaign: dict[str, Any] | None) -> dict[str, Any]:
    """How one level's campaign answer relates to the sweep's:
    - match: the same value, or both cannot tell (the sweep's intervals include the tie);
    - cannot tell, sweep answers: the campaign missed an answer the sweep found (not wrong, underpowered);
    - answers, sweep cannot tell: the campaign claimed what the sweep does not support;
    - different answer: both conclusive, different values (a wrong answer by the sweep's account);
    - not run: the campaign has no such level."""
    if campaign is None:
        return {"outcome": "not run", "match": False}
    ours, theirs = sweep["value"], campaign["value"]
    if theirs is None and ours is None:
        outcome = "match"
    elif theirs is None:
        outcome = "cannot tell, sweep answers"
    elif ours is None:
        outcome = "answers, sweep cannot tell"
    else:
        outcome = "match" if _same(theirs, ours) else "different answer"
    return {"outcome": outcome, "match": outcome == "match"}


def compare_campaign(
    path: Path, sweep_levels: list[dict[str, Any]], goal: str | None = None
) -> dict[str, Any]:
    """The campaign report's answer beside the sweep's, level by level. With `goal`, a report of another
    goal is refused (ValueError): its answer says nothing about this question."""
    report = json.loads(path.read_text())
    if goal is not None and report.get("goal") not in (None, goal):
        raise ValueError(f"{path} answers another goal ({report['goal']!r}), not {goal!r}")
    theirs = {_key(le["level"]): le for le in campaign_answers(report)}
    levels = []
    for ours in sweep_levels:
        camp = theirs.get(_key(ours["level"]))
        levels.append(
            {"level": ours["level"], "sweep": ours["value"], "campaign": camp, **agreement(ours, camp)}
        )
    return {
        "report": str(path),
        "answer_text": report.get("answer"),
        "levels": levels,
        "match": bool(levels) and all(le["match"] for le in levels),
    }


def _key(level: Any) -> Any:
    """Levels read back from JSON compare as numbers where they are numbers (4 == 4.0)."""
    return float(level) if isinstance(level, (int, float)) and not isinstance(level, bool) else level


# -- outputs ------------------------------------------------------------------------------------------------
def _iv(d: dict | None) -> str:
    if d is None or d["lo"] is None:
        return f"{fmt(d['mean'])} (no interval)" if d else "n/a"
    return f"{fmt(d['mean'])} [{fmt(d['lo'])}, {fmt(d['hi'])}]"


def _value(v: Any) -> str:
    return "cannot tell" if v is None else fmt(v)


def agreement_md(cmp: dict[str, Any] | None, command: str) -> list[str]:
    if cmp is None:
        return [
            "Not compared yet: run the campaign (`a3r research` with the same goal, --set settings and budget), "
            f"then rerun `{command}` with `--campaign-report reports/<campaign>/report.json` (finished runs are "
            "reused; without the run dirs, add `--from-json` with this page's JSON and nothing reruns).",
        ]
    lines = [
        f"Campaign report `{cmp['report']}` answers:",
        "",
        f"> {cmp['answer_text'] or '(no answer text)'}",
        "",
    ]
    for le in cmp["levels"]:
        where = "" if le["level"] is None else f"At level {fmt(le['level'])}: "
        camp = le["campaign"]["value"] if le["campaign"] else None
        lines.append(f"- {where}campaign {_value(camp)}, sweep {_value(le['sweep'])}: **{le['outcome']}**.")
    lines += ["", f"**{'Match' if cmp['match'] else 'No match'}.**"]
    return lines


def steps_md(cfg: dict[str, Any]) -> str:
    """How long the runs train, in words: the stage's steps, or, when the goal studies the step count (as
    its variable or its secondary variable), that each arm trains its own (a page must not name one count
    for runs that train 1 to 8 steps)."""
    goal = parse_goal(cfg["goal"])
    if goal.factor.key == STEPS_KEY:
        return f"each arm training its own step count ({', '.join(fmt(x) for x in cfg['grid'])} steps)"
    if goal.secondary is not None and goal.secondary.key == STEPS_KEY:
        return f"each arm training its level's step count ({', '.join(fmt(v) for v in cfg['levels'])} steps)"
    return f"{cfg['steps']} steps each (where the arm does not set its own)"


def write_md(path: Path, result: dict[str, Any]) -> None:
    m, cfg = result["machine"], result["config"]
    threshold = cfg["question"]["shape"] in THRESHOLD_SHAPES
    lines = [
        f"# {cfg['title']}",
        "",
        f"Goal: *{cfg['goal']}* ({cfg['question']['shape']} of {cfg['variable']}). Every arm of the campaign's "
        f"first grid, seeds {cfg['seeds']}, {steps_md(cfg)}, with "
        f"the jobs `a3r research` builds; analysed by `a3r.analysis.analyse` at one look (confidence level "
        f"{fmt(cfg['question']['level'])}, {cfg['question']['eval_items']} held-out items, unpaired).",
        "",
        "```",
        result["command"],
        "```",
        "",
        *(
            [
                f"Analysed again from the runs recorded in `{result['from_json']}` (no run dirs; nothing reran).",
                "",
            ]
            if result.get("from_json")
            else []
        ),
        f"Machine: {m['processor'] or m['platform']}, {m['cpu_count']} CPUs, torch {m['torch']}, commit "
        f"`{m['git_commit'][:12]}`{' (dirty)' if m['git_dirty'] else ''}; load average "
        f"{m['loadavg_before'][0]:.2f} before, {m['loadavg_after'][0]:.2f} after. {runs_wall_md(result)}",
        "",
        f"| arm | n | step-0 {cfg['question']['metric']} | {cfg['question']['statistic']} score | gain | trains "
        f"| label | {'test against the criterion' if threshold else 'interval the label is read from'} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {a['arm']} | {a['n']} | {fmt(a['step0_mean'])} | {_iv(a['score'])} | {_iv(a['gain'])} | "
        f"{'yes' if a['trained'] else 'no'} | {a['status']} | {_iv(a['test'])} |"
        for a in result["arms"]
    ]
    lines.append("")
    if threshold:
        lines += [
            f"Criterion (fixed before any run): an arm {cfg['criterion']}"
            + "".join(f"; on the gain scale {_iv(c)}" for c in result["criterion"] if c["mean"])
            + ".",
            "",
        ]
    lines += [
        "## Verdict",
        "",
        result["answer"]["text"],
        "",
        "## Does the campaign agree?",
        "",
        *agreement_md(result["campaign"], result["command"]),
        "",
    ]
    path.write_text("\n".join(lines))


def runs_wall_md(result: dict[str, Any]) -> str:
    """How long the runs took, how many ran at once, and at what thread counts. A run's thread count changes
    its speed, not what it computes (the same job and seed; only the order of float sums can differ), so runs
    of different thread counts are analysed together; their wall times are not comparable with each other,
    and the page says so."""
    slots = result.get("slots")
    if slots is None:  # a sweep made before slots: one run at a time, in-process, all cores
        return (
            f"The runs took {result['runs_wall_s'] / 60:.1f} min in all (sum of per-run wall times; one run at a "
            f"time); the cost model expected {_minutes(result['expected_s']['all_s'])}."
        )
    threads = result.get("threads")
    text = (
        f"The runs took {result['runs_wall_s'] / 60:.1f} min in all (sum of per-run wall times), "
        f"{_minutes(result.get('span_wall_s'))} from the first run's start to the last one's end, "
        f"{_minutes(result.get('sweep_wall_s'))} of wall for those trained by this invocation, {slots} at a time with "
        f"{threads or 'all'} thread(s) each; the cost model expected {_minutes(result['expected_s']['all_s'])} "
        f"in all at that thread count and {_minutes(result.get('expected_wall_s'))} of wall for those runs."
    )
    counts = thread_counts(result["runs"])
    if len(counts) > 1:
        text += (
            f" **The runs were made at different thread counts ({', '.join(map(str, counts))}; None: all cores, "
            "before slots):** their scores are analysed together (a thread count changes a run's speed, not its "
            "job), but their wall times do not compare with each other."
        )
    return text


def _minutes(s: float | None) -> str:
    return "no estimate (no cost prior for this model)" if s is None else f"{s / 60:.1f} min"


def write_png(path: Path, result: dict[str, Any]) -> None:
    fig = sweep_figure(result)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sweep_figure(result: dict[str, Any]) -> Any:
    """The sweep's figure: each run's step-0 and final score (left); each arm's mean and interval on the
    scale its label is read from (right), with, for a threshold, 0, the criterion and the fail margin."""
    arms, cfg = result["arms"], result["config"]
    threshold = cfg["question"]["shape"] in THRESHOLD_SHAPES
    pos = {a["arm"]: i for i, a in enumerate(arms)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in result["runs"]:
        if "final" in r:
            i = pos[r["arm"]]
            left.plot(
                [i - 0.2, i + 0.2], [r["step0"], r["final"]], "o-", color=f"C{r['seed'] % 10}", alpha=0.8
            )
    for s in sorted({r["seed"] for r in result["runs"]}):
        left.plot([], [], "o-", color=f"C{s % 10}", label=f"seed {s}")
    left.set_title(f"held-out {cfg['question']['metric']}: step 0 (left) -> end (right), per run", fontsize=9)
    left.legend(fontsize=7)
    # thresholds are decided on the gain, best/compare on the score itself
    key, row_key = ("gain", "gain") if threshold else ("score", "final")
    for a in arms:
        i, g = pos[a["arm"]], a[key]
        if g["lo"] is not None:
            right.errorbar(
                i, g["mean"], yerr=[[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]], fmt="s", capsize=6
            )
        else:
            right.plot(i, g["mean"], "s")
        values = [r[row_key] for r in result["runs"] if r["arm"] == a["arm"] and row_key in r]
        right.plot([i + 0.12] * len(values), values, ".", color="grey")
        right.annotate(a["status"], (i, g["mean"]), textcoords="offset points", xytext=(10, -3), fontsize=8)
    if threshold:
        right.axhline(0, color="black", lw=0.8)
        for c in result["criterion"]:
            right.axhline(c["mean"], color="C3", ls="--", lw=1, label="criterion (gain scale)")
        for fm in result.get("fail_margin", []):  # a JSON written before the key has none to draw
            at = "" if fm["secondary_level"] is None else f" at {fmt(fm['secondary_level'])}"
            right.axhline(
                fm["gain"],
                color="C1",
                ls=":",
                lw=1.2,
                label=f"fail margin{at}: {fm['fraction']:.0%} of {fm['reference']}'s gain, {fmt(fm['gain'])}",
            )
        right.legend(fontsize=8)
    right.set_title(f"{key}: mean and {fmt(cfg['question']['level'])} t interval", fontsize=9)
    for ax in (left, right):
        ax.set_xticks(range(len(arms)), [a["arm"] for a in arms], fontsize=8)
        ax.set_xlabel(cfg["variable"])
    fig.tight_layout()
    return fig


# -- main ---------------------------------------------------------------------------------------------------
def print_plan(
    goal: Goal, q: Question, runs: list[PlannedRun], slots: int = 1, threads: int | None = None
) -> None:
    arms = {r.label: r.job for r in runs}  # one job per arm (seed aside), in grid order
    common, per_arm = split_settings(list(arms.values()), TrainJob().model_dump(mode="json"))
    print(f"goal: {goal.describe()}")
    for a in goal.assumptions:
        print(f"  assumption: {a}")
    print(
        f"question: {q.shape} {q.name}, {q.statistic} {q.metric}, {q.looks} look at level {fmt(q.level)}, "
        f">= {q.min_seeds} seeds per label, {q.eval_items} held-out items"
    )
    if q.shape in THRESHOLD_SHAPES:
        print(
            f"criterion ({q.criterion_kind} {fmt(q.criterion_value)}): an arm {goal.criterion.describe(q.metric)}"
        )
    seeds = sorted({r.seed for r in runs})
    print(f"arms: {', '.join(arms)} x seeds {seeds} = {len(runs)} runs")
    print(
        f"job settings that differ from the engine's TrainJob defaults, in every run ({SEED_PATH} = the run's seed):"
    )
    for key, value in common.items():
        print(f"  {key} = {value!r}")
    for label, settings in zip(arms, per_arm, strict=True):
        print(f"  {label}: " + ", ".join(f"{k} = {v!r}" for k, v in settings.items()))
    cost = expected_seconds(runs, threads)
    per = f"{threads or 'all'} thread(s) a run"
    print(f"runs, in order (the cost model's seconds each at {per}, a3r.leader.costs.run_seconds):")
    for r in runs:
        s = run_seconds(r.job, int(r.job["swarm"]["training"]["max_steps"]), threads)
        eta = "no estimate" if s is None else f"~{s:.0f} s"
        print(f"  {r.label:12} seed {r.seed}  {r.run_dir}  {eta}  {'done, reused' if r.done else 'to run'}")
    if cost["all_s"] is not None:
        print(
            f"expected run time at {per}: {cost['all_s'] / 3600:.2f} h in all, "
            f"{cost['to_run_s'] / 3600:.2f} h still to run; expected wall of those on {slots} slot(s): "
            f"{expected_wall(runs, slots, threads) / 3600:.2f} h (a3r.leader.costs.schedule_seconds)"
        )


def out_default(preset: Preset | None) -> str:
    return preset.out if preset else "docs/benchmarks/goal_sweep"


def build_parser(preset: Preset | None) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if preset is None:
        ap.add_argument("goal", help="the goal sentence, as given to `a3r research`")
    ap.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds per arm (>= 3 for a label)"
    )
    ap.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="TrainJob setting for every run, as `a3r research --set` (repeatable)",
    )
    ap.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="ResearchBudget fields, as `a3r research --budget` (steps, grid_points, alpha, min_seeds matter here)",
    )
    default_out = out_default(preset)
    default_runs = preset.runs if preset else "runs/goal_sweep"
    ap.add_argument(
        "--out",
        help=f"writes OUT.json, OUT.md and OUT.png (default {default_out}; with --from-json, its path)",
    )
    ap.add_argument("--runs", default=default_runs, help="run dirs go to RUNS/<arm>-seed<seed>/")
    ap.add_argument(
        "--dry-run", action="store_true", help="print the planned jobs, runs and CPU time; run nothing"
    )
    ap.add_argument(
        "--slots",
        type=int,
        help="runs at once, each in a child process with cores // SLOTS CPU threads (default: the slots A3R "
        "gives this host, a3r.config.local_host: one 1-thread slot per core on a CPU host)",
    )
    hint = preset.report_hint if preset else "reports/<campaign>/report.json"
    ap.add_argument("--campaign-report", type=Path, help=f"a campaign's report JSON to compare with ({hint})")
    ap.add_argument(
        "--from-json",
        type=Path,
        help="a committed sweep JSON of exactly these arguments: analyse its runs' scores, run nothing",
    )
    return ap


def main(argv: list[str] | None = None, preset: Preset | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # one run of the sweep, in the child process execute_all started
        train_prepared(Path(argv[1]))
        return
    args = build_parser(preset).parse_args(argv)
    if args.slots is not None and args.slots < 1:
        raise SystemExit("goal_sweep: --slots must be >= 1")
    slots, threads = host_slots(args.slots)
    text = preset.goal if preset else args.goal
    script = preset.script if preset else "benchmarks/goal_sweep.py"
    settings = [*(preset.settings if preset else ()), *args.settings]
    try:
        goal = parse_goal(text)
        budget = research_budget(preset.budget if preset else {}, args.budget)
        base = base_job(settings)
    except ValueError as e:
        raise SystemExit(f"goal_sweep: {e}") from None
    steps = goal.steps or budget.steps  # as the leader's effective_budget
    q = sweep_question(goal, budget, base)
    runs = plan(goal, base, steps, list(dict.fromkeys(args.seeds)), Path(args.runs), budget)
    title = f"{'Demo question' if preset else 'Goal'} by exhaustive sweep"
    config = sweep_config(title, text, goal, settings, budget, steps, runs, q)
    print_plan(goal, q, runs, slots, threads)
    if args.dry_run:
        return

    if args.from_json:
        try:
            committed = read_committed(args.from_json, config, runs)
            obs = observations_from_rows(runs, committed["runs"], q)
        except (OSError, ValueError) as e:
            raise SystemExit(f"goal_sweep: --from-json: {e}") from None
        print(f"analysing the {len(runs)} runs recorded in {args.from_json}; nothing runs")
    else:
        load_before = loadavg()
        expected = expected_seconds(runs, threads)
        expected_wall_s = expected_wall(runs, slots, threads)
        t0 = time.perf_counter()
        walls = execute_all(runs, slots, threads)
        sweep_wall_s = time.perf_counter() - t0
        obs = observations(runs, q.metric)

    ev = analyse(q, obs)  # the same analysis whether the runs were read from their dirs or from the JSON
    levels = [level_answer(le) for le in ev.levels]
    answer = {"text": ev.answer, "conclusive": ev.conclusive, "levels": levels}
    if len(levels) == 1:
        answer["value"] = levels[0]["value"]
    try:
        campaign = compare_campaign(args.campaign_report, levels, text) if args.campaign_report else None
    except (OSError, ValueError) as e:
        raise SystemExit(f"goal_sweep: --campaign-report: {e}") from None
    analysis = {
        "arms": arm_rows(ev),
        "untrained": ev.untrained.as_dict() if ev.untrained else None,
        "criterion": criteria(ev),
        "answer": answer,
        "campaign": campaign,
    }
    if margins := fail_margins(ev):  # a threshold's only: other sweeps' JSON keeps the keys it always had
        analysis["fail_margin"] = margins
    if args.from_json:  # the runs, their times and machine are the committed sweep's; the analysis is new
        result = {**committed, **analysis, "from_json": str(args.from_json)}
    else:
        result = {
            "benchmark": Path(script).stem,
            "command": shlex.join([".venv/bin/python", script, *argv]),
            "config": config,
            "runs": run_rows(runs, obs, q, walls),
            **analysis,
            "runs_wall_s": sum(w for w in walls if w is not None),
            "slots": slots,
            "threads": threads,
            "sweep_wall_s": sweep_wall_s,
            "span_wall_s": run_span_s(runs),
            "expected_s": expected,
            "expected_wall_s": expected_wall_s,
            "machine": machine_record(load_before),
        }
    out = Path(args.out or (args.from_json.with_suffix("") if args.from_json else out_default(preset)))
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(result, indent=2, default=str))
    write_md(Path(f"{out}.md"), result)
    write_png(Path(f"{out}.png"), result)
    print(ev.answer)
    if result["campaign"]:
        c = result["campaign"]
        print(
            f"campaign: {c['answer_text']} ({'match' if c['match'] else 'no match'}: "
            + "; ".join(le["outcome"] for le in c["levels"])
            + ")"
        )
    print(f"wrote {out}.json, {out}.md, {out}.png")


if __name__ == "__main__":
    main()
