"""Brute-force check of `a3r demo`: every arm of the demo question, several seeds, analysed like the campaign.

`a3r demo` searches for "the minimum batch size that still trains arithmetic (2 to 8)" after a calibration
stage. This script runs the whole grid of that question (batch sizes 2 and 8: `grid(goal.factor,
grid_points)`) with every seed, sequentially, and answers it with the project's own analysis
(`a3r.analysis.analyse`) so the campaign's conclusion can be checked against it.

The engine jobs are built by the leader's own code (`a3r.leader.blueprints.train_job` over the demo's base
job: `DEFAULT_BASE_JOB` <- `DEMO_SETTINGS`), and each run's seed is set at the top-level `seed` key, as
the leader's blueprints do (`seed_path="seed"`; `swarm.model.seed` stays at its default for every seed).
The question is the campaign's (`question_of(goal, budget, eval_items)`) at one look: the sweep decides
once, on all its runs. It has no calibration stage, so the reference gain of the relative criterion is
the largest batch size's own seeds (the campaign's pilot runs are the same configuration and seeds 0-2).

Each run lives in `<runs>/bs<x>-seed<seed>/` (the engine's `metrics.jsonl`, `summary.json`, and this
script's `sweep_run.json`: the job it ran and its wall time). A run whose `summary.json` exists is reused,
after checking it ran the job planned now; an unfinished run dir is cleared and run again, so an
interrupted sweep resumes by running the same command.

    .venv/bin/python benchmarks/demo_sweep.py --seeds 0 1 2 --out docs/benchmarks/demo_sweep

Compare with a finished campaign (its report JSON; completed runs are reused, nothing retrains):

    .venv/bin/python benchmarks/demo_sweep.py --campaign-report reports/demo-min-batch-size/report.json
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis import ArmStats, Evidence, Question, RunObs, ThresholdResult, analyse, fmt  # noqa: E402
from a3r.blueprints import deep_merge  # noqa: E402
from a3r.cli_values import parse_value  # noqa: E402
from a3r.leader.blueprints import DEFAULT_BASE_JOB, train_job  # noqa: E402
from a3r.leader.demo import DEMO_BUDGET, DEMO_CAMPAIGN, DEMO_GOAL, DEMO_SETTINGS  # noqa: E402
from a3r.leader.design import Arm, ResearchBudget, arm_label, grid  # noqa: E402
from a3r.leader.goals import Goal, parse_goal  # noqa: E402
from a3r.leader.knobs import set_dotted  # noqa: E402
from a3r.report import eval_items_of, question_of  # noqa: E402
from a3r.worker.metrics import parse_metric_bytes  # noqa: E402
from benchmarks.common import loadavg, machine_record  # noqa: E402
from engine.jobs import TrainJob  # noqa: E402
from engine.launch import train  # noqa: E402

SEED_PATH = "seed"  # where the leader's blueprints put each run's seed (stage_blueprints: seed_path="seed")
RUN_RECORD = "sweep_run.json"
REPORT_HINT = f"reports/{DEMO_CAMPAIGN}/report.json"


@dataclass(frozen=True)
class PlannedRun:
    x: Any
    seed: int
    label: str
    job: dict[str, Any]
    run_dir: Path

    @property
    def done(self) -> bool:
        return (self.run_dir / "summary.json").exists()


# -- the jobs, built like the campaign's ----------------------------------------------------------------
def base_job(settings: tuple[str, ...]) -> dict[str, Any]:
    """The leader's base job with the demo's KEY=VALUE settings (as `a3r demo --set` applies them)."""
    job = deep_merge(DEFAULT_BASE_JOB, {})
    for item in settings:
        key, _sep, value = item.partition("=")
        set_dotted(job, key.strip(), parse_value(value))
    return job


def with_seed(job: dict[str, Any], seed: int) -> dict[str, Any]:
    """A copy of `job` with `seed` at SEED_PATH (what `Blueprint.effective_config(seed)` does)."""
    out = deep_merge(job, {})
    set_dotted(out, SEED_PATH, seed)
    return out


def plan(goal: Goal, base: dict[str, Any], steps: int, seeds: list[int], runs_root: Path) -> list[PlannedRun]:
    """Every (batch size, seed) run, seed-major so that an interrupted sweep has every arm equally seeded."""
    if goal.secondary is not None:
        raise SystemExit("demo_sweep covers goals without a secondary variable")
    xs = grid(goal.factor, DEMO_BUDGET["grid_points"])
    jobs = {x: train_job(goal, Arm(x=x, level=None, seeds=seeds, why="sweep"), steps, base) for x in xs}
    return [
        PlannedRun(x, seed, arm_label(goal, x), with_seed(jobs[x], seed), runs_root / f"bs{x}-seed{seed}")
        for seed in seeds
        for x in xs
    ]


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


# -- running ----------------------------------------------------------------------------------------------
def read_record(run: PlannedRun) -> dict[str, Any]:
    path = run.run_dir / RUN_RECORD
    return json.loads(path.read_text()) if path.exists() else {}


def _effective(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job with the engine's current defaults filled in: a field the engine added since the run was
    recorded (at its default) is the same job, not another one."""
    return None if job is None else TrainJob.model_validate(job).model_dump(mode="json")


def execute(run: PlannedRun) -> float | None:
    """Run it unless finished (then check that it ran this job); the run's wall seconds."""
    if run.done:
        record = read_record(run)
        if _effective(record.get("job")) != _effective(run.job):
            raise SystemExit(
                f"{run.run_dir} holds a finished run of another job than the one planned now (the demo "
                "settings changed?); delete it or pass another --runs"
            )
        return record.get("wall_s")
    shutil.rmtree(run.run_dir, ignore_errors=True)  # an unfinished run's partial metrics would mix in
    run.run_dir.mkdir(parents=True)
    record = {"label": run.label, "seed": run.seed, "job": run.job, "wall_s": None}
    (run.run_dir / RUN_RECORD).write_text(json.dumps(record, indent=2))
    t0 = time.perf_counter()
    train(TrainJob.model_validate(run.job), run.run_dir)
    record["wall_s"] = time.perf_counter() - t0
    (run.run_dir / RUN_RECORD).write_text(json.dumps(record, indent=2))
    return record["wall_s"]


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
            level=None,
            label=r.label,
            state="succeeded",
            series=series_from_bytes((r.run_dir / "metrics.jsonl").read_bytes(), metric),
        )
        for i, r in enumerate(runs, start=1)
    ]


def sweep_question(goal: Goal, base: dict[str, Any]) -> Question:
    """The campaign's question (criterion, alpha, min_seeds, eval noise floor) decided at a single look."""
    return replace(question_of(goal, ResearchBudget(**DEMO_BUDGET), eval_items_of(base)), looks=1)


def the_threshold(ev: Evidence) -> ThresholdResult:
    (level,) = ev.levels
    return level.threshold


def run_rows(runs: list[PlannedRun], obs: list[RunObs], q: Question, walls: list[float | None]) -> list[dict]:
    rows = []
    for r, o, wall in zip(runs, obs, walls, strict=True):
        s = o.score()
        row = {"arm": r.label, "x": r.x, "seed": r.seed, "run_dir": str(r.run_dir), "wall_s": wall}
        if s is not None:
            score = s.get(q.statistic)
            row |= {"step0": s.initial, "final": score, "gain": score - s.initial, "last_step": s.last_step}
        rows.append(row)
    return rows


def arm_rows(th: ThresholdResult, arms: list[ArmStats]) -> list[dict]:
    return [
        {
            "arm": a.label,
            "x": a.x,
            "n": a.n,
            "score": a.interval.as_dict(),
            "step0_mean": a.initial,
            "gain": a.gain_interval.as_dict() if a.gain_interval else None,
            "trained": a.trained,
            "status": th.status.get(a.label, ""),
            "criterion_test": th.tests[a.label].as_dict(),
        }
        for a in arms
    ]


def answer_of(th: ThresholdResult) -> dict[str, Any]:
    return {"value": th.answer.x if th.answer else None, "conclusive": th.conclusive}


# -- the campaign's answer ----------------------------------------------------------------------------------
def find_answer(data: Any) -> tuple[str | None, Any]:
    """The first text and the first non-text scalar under keys containing "answer" (outermost first)."""
    text, value = None, None
    stack = [data]
    while stack:
        node = stack.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, v in items:
            if isinstance(v, (dict, list)):
                stack.append(v)
            elif "answer" in str(key).lower():
                if isinstance(v, str) and text is None:
                    text = v
                elif isinstance(v, (int, float)) and not isinstance(v, bool) and value is None:
                    value = v
    return text, value


def value_in_text(text: str) -> float | None:
    """The answer value of a threshold verdict sentence ("... that still trains is 2: ...")."""
    m = re.search(r"that still trains is ([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)", text)
    return float(m.group(1)) if m else None


def compare_campaign(path: Path, ours: Any) -> dict[str, Any]:
    text, value = find_answer(json.loads(path.read_text()))
    theirs = value if value is not None else value_in_text(text or "")
    same = (theirs is None and ours is None) or (
        theirs is not None and ours is not None and float(theirs) == float(ours)
    )
    return {"report": str(path), "answer_text": text, "answer_value": theirs, "same_answer": same}


# -- machine ------------------------------------------------------------------------------------------------
# -- outputs ------------------------------------------------------------------------------------------------
def _iv(d: dict | None) -> str:
    if d is None or d["lo"] is None:
        return f"{fmt(d['mean'])} (no interval)" if d else "n/a"
    return f"{fmt(d['mean'])} [{fmt(d['lo'])}, {fmt(d['hi'])}]"


def agreement_md(cmp: dict[str, Any] | None, ours: dict[str, Any]) -> list[str]:
    if cmp is None:
        return [
            "Not compared yet: run `a3r demo`, then rerun this command with "
            f"`--campaign-report {REPORT_HINT}` (finished runs are reused).",
        ]
    verdict = "the same answer" if cmp["same_answer"] else "a different answer"
    return [
        f"Campaign report `{cmp['report']}` answers:",
        "",
        f"> {cmp['answer_text'] or '(no answer text found)'}",
        "",
        f"Its answer value is {fmt(cmp['answer_value']) if cmp['answer_value'] is not None else 'none'}; the "
        f"sweep's is {fmt(ours['value']) if ours['value'] is not None else 'none'}: **{verdict}**.",
    ]


def write_md(path: Path, result: dict[str, Any]) -> None:
    m, cfg = result["machine"], result["config"]
    lines = [
        "# Demo question by exhaustive sweep",
        "",
        f"Goal: *{cfg['goal']}*. Every batch size of the campaign's grid, seeds {cfg['seeds']}, "
        f"{cfg['steps']} steps each, with the jobs `a3r demo` builds; analysed by `a3r.analysis.analyse` "
        f"at one look (confidence level {fmt(cfg['question']['level'])}, "
        f"{cfg['question']['eval_items']} held-out items).",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"Machine: {m['processor'] or m['platform']}, {m['cpu_count']} CPUs, torch {m['torch']}, commit "
        f"`{m['git_commit'][:12]}`{' (dirty)' if m['git_dirty'] else ''}; load average "
        f"{m['loadavg_before'][0]:.2f} before, {m['loadavg_after'][0]:.2f} after. The runs took "
        f"{result['runs_wall_s'] / 60:.1f} min in all (sum of per-run wall times; one run at a time).",
        "",
        "| arm | n | step-0 accuracy | final accuracy | gain | trains | criterion |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {a['arm']} | {a['n']} | {fmt(a['step0_mean'])} | {_iv(a['score'])} | {_iv(a['gain'])} | "
        f"{'yes' if a['trained'] else 'no'} | {a['status']} |"
        for a in result["arms"]
    ]
    lines += [
        "",
        f"Criterion (fixed before any run): an arm {cfg['criterion']}"
        + (f"; on the gain scale {_iv(result['criterion'])}." if result["criterion"]["mean"] else "."),
        "",
        "## Verdict",
        "",
        result["answer"]["text"],
        "",
        "## Does the campaign agree?",
        "",
        *agreement_md(result["campaign"], result["answer"]),
        "",
    ]
    path.write_text("\n".join(lines))


def write_png(path: Path, result: dict[str, Any]) -> None:
    arms = result["arms"]
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
    left.set_title("held-out accuracy: step 0 (left) -> final (right), per run")
    left.set_ylabel("eval_accuracy")
    left.legend(fontsize=8)
    for a in arms:
        i, g = pos[a["arm"]], a["gain"]
        if g["lo"] is not None:
            right.errorbar(
                i, g["mean"], yerr=[[g["mean"] - g["lo"]], [g["hi"] - g["mean"]]], fmt="s", capsize=6
            )
        else:
            right.plot(i, g["mean"], "s")
        gains = [r["gain"] for r in result["runs"] if r["arm"] == a["arm"] and "gain" in r]
        right.plot([i + 0.12] * len(gains), gains, ".", color="grey")
        right.annotate(a["status"], (i, g["mean"]), textcoords="offset points", xytext=(10, -3), fontsize=8)
    right.axhline(0, color="black", lw=0.8)
    crit = result["criterion"]
    right.axhline(crit["mean"], color="C3", ls="--", lw=1, label="criterion (reference gain x fraction)")
    right.set_title(f"gain over step 0: mean and {fmt(result['config']['question']['level'])} t interval")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(range(len(arms)), [a["arm"] for a in arms])
        ax.set_xlabel("batch size")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- main ---------------------------------------------------------------------------------------------------
def print_plan(goal: Goal, q: Question, runs: list[PlannedRun]) -> None:
    arms = {r.label: r.job for r in runs}  # one job per arm (seed aside), in grid order
    common, per_arm = split_settings(list(arms.values()), TrainJob().model_dump(mode="json"))
    print(f"goal: {goal.describe()}")
    print(
        f"question: {q.shape} {q.name}, {q.statistic} {q.metric}, {q.looks} look at level {fmt(q.level)}, "
        f">= {q.min_seeds} seeds per label, {q.eval_items} held-out items"
    )
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
    print("runs, in order:")
    for r in runs:
        print(f"  {r.label:6} seed {r.seed}  {r.run_dir}  {'done, reused' if r.done else 'to run'}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds per arm (>= 3 for a label)"
    )
    ap.add_argument("--out", default="docs/benchmarks/demo_sweep", help="writes OUT.json, OUT.md and OUT.png")
    ap.add_argument("--runs", default="runs/demo_sweep", help="run dirs go to RUNS/bs<x>-seed<seed>/")
    ap.add_argument("--dry-run", action="store_true", help="print the planned jobs and runs, run nothing")
    ap.add_argument(
        "--campaign-report", type=Path, help=f"a campaign's report JSON to compare with ({REPORT_HINT})"
    )
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)

    goal = parse_goal(DEMO_GOAL)
    base = base_job(DEMO_SETTINGS)
    steps = goal.steps or DEMO_BUDGET["steps"]  # as the leader's effective_budget
    q = sweep_question(goal, base)
    runs = plan(goal, base, steps, list(dict.fromkeys(args.seeds)), Path(args.runs))
    print_plan(goal, q, runs)
    if args.dry_run:
        return

    load_before = loadavg()
    walls = []
    for k, r in enumerate(runs, start=1):
        print(f"[{k}/{len(runs)}] {r.label} seed {r.seed}: {'reused' if r.done else 'training'}", flush=True)
        walls.append(execute(r))

    obs = observations(runs, q.metric)
    ev = analyse(q, obs)
    th = the_threshold(ev)
    answer = {"text": ev.answer, **answer_of(th)}
    result = {
        "benchmark": "demo_sweep",
        "command": shlex.join([".venv/bin/python", "benchmarks/demo_sweep.py", *argv]),
        "config": {
            "goal": DEMO_GOAL,
            "campaign": DEMO_CAMPAIGN,
            "settings": list(DEMO_SETTINGS),
            "budget": DEMO_BUDGET,
            "steps": steps,
            "grid": sorted({r.x for r in runs}),
            "seeds": sorted({r.seed for r in runs}),
            "question": {**asdict(q), "level": q.level},
            "criterion": goal.criterion.describe(goal.metric),
            "jobs": {r.label: {k: v for k, v in r.job.items() if k != SEED_PATH} for r in runs},
        },
        "runs": run_rows(runs, obs, q, walls),
        "arms": arm_rows(th, ev.levels[0].arms),
        "untrained": ev.untrained.as_dict() if ev.untrained else None,
        "criterion": th.criterion.as_dict(),
        "answer": answer,
        "campaign": compare_campaign(args.campaign_report, answer["value"]) if args.campaign_report else None,
        "runs_wall_s": sum(w for w in walls if w is not None),
        "machine": machine_record(load_before),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(result, indent=2, default=str))
    write_md(Path(f"{out}.md"), result)
    write_png(Path(f"{out}.png"), result)
    print(ev.answer)
    if result["campaign"]:
        print(
            f"campaign: {result['campaign']['answer_text']} (same answer: {result['campaign']['same_answer']})"
        )
    print(f"wrote {out}.json, {out}.md, {out}.png")


if __name__ == "__main__":
    main()
