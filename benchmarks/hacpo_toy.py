"""HACPO toy reproduction on CPU (specs/hacpo.md, "Toy reproduction"): two heterogeneous agents with
complementary skills, HACPO vs GSPO vs GSPOx2 vs naive sharing, paired seeds, held-out accuracy per agent.

Agents: `smol` = SmolLM2-135M-Instruct (pretrained, SmolLM2 BPE tokenizer) and `bytes` = a small model
trained from scratch with a byte-level tokenizer (`tiny-bytes` by default, or any HF dir via
--second-model). Each is supervised first (the registry's `nll` loss) on one operation of the task
`arithmetic_pm` (a + b or a - b, 1..50): smol on additions, bytes on subtractions, so each is weak where
the other is strong and their capabilities differ. The from-scratch second model needs far more SFT than
the pretrained first; its budget is chosen among `--sft-candidates-second` by greedy accuracy on a
validation split (`--val-size` items of the mixed task from their own seed, disjoint from the held-out test
items; no SFT stream contains either), on seed 0, and then used for every seed. The held-out test items
are only ever evaluated, never used to choose a setting. Then, per seed and method, a `swarm train` team job
(one swarm server per agent) runs RL on the mixed task from the same SFT checkpoints and the same prompt
order (the seed), and held-out greedy accuracy is measured before and after for each agent.

Reported: accuracy per agent and method; paired t 95% intervals (over seeds) of HACPO - GSPOx2,
GSPOx2 - naive and HACPO - GSPO; per-step diagnostics from the servers' metrics (cross-sample s
mean/min/max, share below the lower clip, clip fractions per m, P_j, omega, zero-variance group share own
vs joint, re-tokenisation length ratio and truncation) and each agent's accuracy on its own rollouts.

    python benchmarks/hacpo_toy.py --seeds 0 1 2 --out docs/benchmarks/hacpo_toy       # the lead runs this
    python benchmarks/hacpo_toy.py --smoke --out /tmp/hacpo_smoke                       # minutes, tiny models

A finished run (its `summary.json`, and `toy_job.json` equal to the job planned now) is reused, so an
interrupted reproduction resumes by running the same command; the SFT checkpoints are reused likewise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis import t_interval  # noqa: E402
from benchmarks.common import loadavg, machine_record  # noqa: E402
from engine.config import ModelConfig, SwarmConfig  # noqa: E402
from engine.jobs import ServerProcess, TrainJob, evaluate  # noqa: E402
from engine.launch import train  # noqa: E402
from engine.tasks import get_task  # noqa: E402
from engine.tasks.arithmetic import Arithmetic  # noqa: E402
from engine.tasks.base import HELD_OUT_SEED, Item, distinct_items, split_items  # noqa: E402
from engine.training.metrics import MetricsLog  # noqa: E402
from engine.training.supervised import supervise as train_supervised  # noqa: E402

TASK = "arithmetic_pm"
VALIDATION_SEED = 20_000  # the validation split's own stream; its items skip the held-out test items
METHODS = ("hacpo", "gspo", "gspox2", "naive")
COMPARISONS = (("hacpo", "gspox2"), ("gspox2", "naive"), ("hacpo", "gspo"))
DIAGNOSTICS = (
    "cross_s_mean", "cross_s_min", "cross_s_max", "cross_below_lo_frac", "cross_above_1_frac", "own_clip_frac",
    "omega_mean", "zero_var_frac_own", "zero_var_frac_joint", "retok_len_ratio", "retok_truncated_frac",
    "cross_dropped_empty", "cross_in_band_frac", "optimizer_steps_skipped",
)


# -- supervised warm-up ------------------------------------------------------------------------------
def validation_items(n: int, test_ids: set[str]) -> list[Item]:
    """`n` distinct items of the mixed task from VALIDATION_SEED, none of them a held-out test item."""
    return distinct_items(get_task(TASK), n, VALIDATION_SEED, exclude=test_ids)


def supervise(model: str, ops: str, seed: int, steps: int, lr: float, args, out: Path, excluded_ids: set[str]) -> dict:
    """Teach `model` one operation with the registry's nll loss (engine.training.supervised), in the
    dataset's order, skipping `excluded_ids` (the test and validation items); saves a plain HF dir at
    `out` and this script's summary (`sft.json`)."""
    if (out / "config.json").exists():
        return json.loads((out / "sft.json").read_text())
    stream = [it for it in Arithmetic(ops=ops).dataset(4 * steps * args.sft_batch, 5_000 + seed) if it.id not in excluded_ids]
    done = train_supervised(
        ModelConfig(name=model), [(it.id, it.prompt, str(it.answer)) for it in stream], out,
        steps=steps, batch=args.sft_batch, lr=lr, seed=seed, shuffle=False,
    )
    info = {"model": model, "ops": ops, "steps": steps, "lr": lr, "nll_first": done["nll_first"], "nll_last": done["nll_last"], "wall_s": done["wall_s"]}
    (out / "sft.json").write_text(json.dumps(info))
    return info


def sft_dir(runs_root: Path, agent: str, seed: int, steps: int, lr: float, batch: int, val_size: int) -> Path:
    """One folder per SFT setting and data (the stream skips `val_size` validation items), so that changed
    settings never reuse another setting's weights (and the RL jobs, which name these folders, differ too)."""
    return runs_root / "sft" / f"{agent}-seed{seed}-{steps}x{batch}-lr{lr:g}-val{val_size}"


def greedy_accuracy(model_dir: Path, items: list[Item], args, log_dir: Path) -> float:
    """Greedy accuracy of a saved model on `items`, served and scored exactly as the RL jobs' evaluations."""
    log_dir.mkdir(parents=True, exist_ok=True)
    job = TrainJob(task=TASK, max_tokens=args.max_tokens, concurrency=args.batch * args.group, eval_size=0)
    server = ServerProcess(None, log_path=log_dir / "server.log")
    try:
        with server.client() as client:
            client.configure(SwarmConfig(model={"name": str(model_dir.resolve())}))
            client.start(wait=True)
            return evaluate(client, job, items, f"validation {model_dir.name}", 0, MetricsLog(log_dir), key="val_accuracy")
    finally:
        server.stop()


def select_second_sft(args, runs_root: Path, excluded_ids: set[str], val: list[Item]) -> tuple[tuple[int, float], list[dict]]:
    """The second model's SFT budget: each (steps, lr) of --sft-candidates-second trained on seed 0 and
    scored on the validation items; the most accurate wins, ties go to fewer steps."""
    table = []
    for steps, lr in args.sft_candidates_second:
        out = sft_dir(runs_root, "bytes", 0, steps, lr, args.sft_batch, len(val))
        info = supervise(args.second_model, "-", 0, steps, lr, args, out, excluded_ids)
        scored = out / "val.json"
        if not scored.exists():
            scored.write_text(json.dumps({"val_accuracy": greedy_accuracy(out, val, args, out / "val")}))
        table.append({"steps": steps, "lr": lr, "val_accuracy": json.loads(scored.read_text())["val_accuracy"], "sft_wall_s": info["wall_s"]})
    best = choose_budget(table)
    return (best["steps"], best["lr"]), table


def choose_budget(table: list[dict]) -> dict:
    """The highest validation accuracy; among equals the fewest steps (the cheapest setting that does as well)."""
    return max(table, key=lambda r: (r["val_accuracy"], -r["steps"]))


def budget(text: str) -> tuple[int, float]:
    """argparse type of an SFT candidate, STEPS:LR (e.g. 4000:3e-3)."""
    try:
        steps, lr = text.split(":")
        return int(steps), float(lr)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an SFT candidate is STEPS:LR, e.g. 4000:3e-3; got {text!r}") from None


# -- one RL run -------------------------------------------------------------------------------------
def job_for(seed: int, method: str, agents: dict, args) -> TrainJob:
    return TrainJob(
        task=TASK,
        seed=seed,
        eval_size=args.eval_size,
        temperature=1.0,  # the spec's sampling temperature
        max_tokens=args.max_tokens,
        concurrency=args.batch * args.group,
        keep_final_checkpoint=False,
        swarm={
            "pool": {"batch_size": args.batch, "group_size": args.group},
            "training": {"max_steps": args.steps, "mini_batch_size": args.mini_batch, "micro_batch_size": min(8, args.mini_batch), "checkpoint_every": 0},
        },
        team={
            "method": method,
            "agents": agents,
            "hacpo": {"eps_low": args.eps_low, "eps_high": args.eps_high, "cross_normalization": args.normalization},
        },
    )


RUN_RECORD = "toy_run.json"  # the job a run dir ran and its wall seconds


def finished(run_dir: Path, job: TrainJob) -> dict | None:
    """The record of a finished run of exactly this job, so that an interrupted reproduction resumes by
    running the same command; None when it has to run (a different job's run dir is an error)."""
    path = run_dir / RUN_RECORD
    if not (run_dir / "summary.json").exists() or not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("wall_s") is None:
        return None
    if TrainJob.model_validate(record["job"]) != job:
        raise SystemExit(f"{run_dir} holds a finished run of another job than the one planned now; delete it or pass another --runs")
    return record


def run_once(run_dir: Path, job: TrainJob) -> dict:
    """Train `job` in a fresh `run_dir`; its record (job, wall seconds)."""
    shutil.rmtree(run_dir, ignore_errors=True)  # an unfinished run's partial metrics would mix in
    run_dir.mkdir(parents=True)
    record = {"job": job.model_dump(mode="json"), "wall_s": None}
    (run_dir / RUN_RECORD).write_text(json.dumps(record, indent=2))
    t0 = time.time()
    train(job, run_dir)
    record["wall_s"] = time.time() - t0
    (run_dir / RUN_RECORD).write_text(json.dumps(record, indent=2))
    return record


def read_run(run_dir: Path, summary: dict) -> dict:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps: dict[str, list[dict]] = {}
    for r in lines:
        if "agent" in r:
            keep = {k: v for k, v in r.items() if k in DIAGNOSTICS or k.startswith(("P/", "acc/", "own_clip_frac/m", "cross_below_lo_frac/m", "reward/")) or k == "step"}
            steps.setdefault(r["agent"], []).append(keep)
    return {"before": summary.get("accuracy_before", {}), "after": summary.get("accuracy_after", {}), "steps": steps}


# -- statistics -------------------------------------------------------------------------------------
def paired_t(diffs: list[float]) -> tuple[float, float, float]:
    """Mean of the paired (per-seed) differences and its t 95% interval. With 3 seeds the interval is as
    wide as 2 degrees of freedom make it; a percentile bootstrap of 3 values would understate that."""
    iv = t_interval(diffs)
    return iv.mean, iv.lo, iv.hi


def compare(runs: dict, agents: list[str], seeds: list[int], methods: list[str]) -> dict:
    out: dict = {}
    for a, b in COMPARISONS:
        if a not in methods or b not in methods:
            continue
        for agent in agents:
            diffs = [runs[(s, a)]["after"][agent] - runs[(s, b)]["after"][agent] for s in seeds]
            mean, lo, hi = paired_t(diffs)
            out[f"{a}-{b}/{agent}"] = {"mean": mean, "ci95": [lo, hi], "diffs": diffs}
    return out


def ordering(score: dict[str, float]) -> str:
    """Methods from best to worst mean accuracy; equal scores are written as ties (=), not as an order."""
    ranked = sorted(score, key=score.get, reverse=True)
    out = f"{ranked[0]} ({score[ranked[0]]:.3f})"
    for prev, m in zip(ranked, ranked[1:], strict=False):
        out += (" = " if abs(score[prev] - score[m]) < 1e-9 else " > ") + f"{m} ({score[m]:.3f})"
    return out


# -- report -----------------------------------------------------------------------------------------
def plot(runs: dict, agents: list[str], seeds: list[int], methods: list[str], out: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    width = 0.8 / len(agents)
    for i, agent in enumerate(agents):
        means = [statistics.fmean(runs[(s, m)]["after"][agent] for s in seeds) for m in methods]
        before = statistics.fmean(runs[(s, methods[0])]["before"][agent] for s in seeds)
        xs = [k + i * width for k in range(len(methods))]
        axes[0].bar(xs, means, width, label=f"{agent} after")
        axes[0].hlines(before, xs[0] - width / 2, xs[-1] + width / 2, linestyles="dashed", colors=f"C{i}", label=f"{agent} before")
        for s in seeds:
            axes[0].scatter(xs, [runs[(s, m)]["after"][agent] for m in methods], color="k", s=8, zorder=3)
    axes[0].set_xticks([k + width * (len(agents) - 1) / 2 for k in range(len(methods))], methods)
    axes[0].set(ylabel="held-out greedy accuracy", title="after RL (dots: seeds)")
    axes[0].legend(fontsize=7)
    for s in seeds:
        if (s, "hacpo") not in runs:
            continue
        for i, agent in enumerate(agents):
            st = runs[(s, "hacpo")]["steps"].get(agent, [])
            axes[1].plot([r["step"] for r in st], [r.get("cross_s_mean", float("nan")) for r in st], color=f"C{i}", alpha=0.7, marker="o")
            axes[2].plot([r["step"] for r in st], [r.get(f"P/{agent}", float("nan")) for r in st], color=f"C{i}", alpha=0.7, marker="o")
    axes[1].set(xlabel="step", ylabel="mean s of cross samples", title="HACPO: importance ratio s (log)", yscale="log")
    axes[2].set(xlabel="step", ylabel="P_j (own capability)", title="HACPO: capability P_j per agent")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


def markdown(report: dict, agents: list[str], methods: list[str], seeds: list[int], runs: dict) -> str:
    cmd = report["command"]
    lines = [
        "# HACPO toy reproduction (CPU)", "",
        f"Command: `{cmd}`", f"Machine: {report['machine']['processor']}, {report['machine']['cpu_count']} cores, torch {report['machine']['torch']}; {report['compute_s'] / 60:.1f} min of runs (the SFT and RL runs' wall times summed; runs that shared the machine count in full).", "",
        "Held-out greedy accuracy after RL, mean over seeds (before RL: "
        + ", ".join(f"{a} {report['before'][a]:.3f}" for a in agents) + ").", "",
        "| method | " + " | ".join(agents) + " |", "|---|" + "---|" * len(agents),
    ]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(f"{statistics.fmean(runs[(s, m)]['after'][a] for s in seeds):.3f}" for a in agents) + " |")
    lines += ["", "Paired differences over seeds (t 95% interval; undefined when every seed gives the same difference):", "", "| comparison | mean | 95% CI |", "|---|---|---|"]
    for k, v in report["comparisons"].items():
        lines.append(f"| {k} | {v['mean']:+.3f} | [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] |")
    lines += ["", f"Measured ordering (mean over agents): {report['ordering']}", "", "![results](" + Path(report["out"]).name + ".png)", ""]
    sel = report["sft_selection"]
    lines += [
        f"The second model's SFT budget, chosen on {sel['val_size']} validation items (seed {sel['val_seed']}, disjoint "
        "from the test items and from every SFT stream), seed 0; the most accurate wins, ties go to fewer steps:", "",
        "| SFT steps | lr | validation accuracy |", "|---:|---:|---:|",
        *[f"| {r['steps']} | {r['lr']:g} | {r['val_accuracy']:.3f} |" for r in sel["candidates"]],
        "", f"Chosen: {sel['chosen']['steps']} steps at lr {sel['chosen']['lr']:g}.", "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--first-model", default="smollm2-135m")
    ap.add_argument("--second-model", default="tiny-bytes", help="a model with another tokenizer (HF dir or built-in)")
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--sft-batch", type=int, default=16)
    ap.add_argument("--sft-lr-first", type=float, default=2e-5, help="SFT lr of the pretrained first model")
    ap.add_argument(
        "--sft-candidates-second", type=budget, nargs="+", default=[(150, 1e-3), (2000, 1e-3), (4000, 3e-3)],
        metavar="STEPS:LR", help="SFT budgets of the from-scratch second model; the validation split picks one",
    )
    ap.add_argument("--val-size", type=int, default=100, help="validation items (disjoint from the test items)")
    ap.add_argument("--steps", type=int, default=12, help="RL steps per run")
    ap.add_argument("--batch", type=int, default=8, help="prompts per step (B)")
    ap.add_argument("--group", type=int, default=4, help="responses per prompt and agent (G)")
    ap.add_argument("--mini-batch", type=int, default=16)
    ap.add_argument("--lr-first", type=float, default=1e-5)
    ap.add_argument("--lr-second", type=float, default=3e-4)
    ap.add_argument("--eps-low", type=float, default=3e-3, help="own-sample GSPO clip, re-tuned for toy scale")
    ap.add_argument("--eps-high", type=float, default=4e-3)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--eval-size", type=int, default=100)
    ap.add_argument(
        "--normalization", choices=["token", "char"], default="char",
        help="cross-sample ratio: char (per-character, the spec's variant for a byte tokenizer against BPE) or token",
    )
    ap.add_argument("--out", default="docs/benchmarks/hacpo_toy")
    ap.add_argument("--runs", default="runs/hacpo_toy")
    ap.add_argument("--smoke", action="store_true", help="tiny models and sizes: checks the pipeline in minutes")
    args = ap.parse_args()
    if args.smoke:
        args.first_model, args.second_model = "tiny", "tiny-bytes"
        args.sft_steps, args.sft_batch, args.steps, args.batch, args.group = 2, 4, 1, 2, 2
        args.sft_candidates_second = [(1, 1e-3), (2, 1e-3)]
        args.mini_batch, args.eval_size, args.val_size, args.seeds = 4, 2, 2, args.seeds[:1]
    load_before = loadavg()
    t0 = time.time()
    runs_root, out = Path(args.runs), Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    test_ids = {it.id for it in split_items(get_task(TASK), 0, args.eval_size, 0, HELD_OUT_SEED)[1]}
    val = validation_items(args.val_size, test_ids)
    excluded = test_ids | {it.id for it in val}
    (steps_2, lr_2), selection = select_second_sft(args, runs_root, excluded, val)
    print(f"second model's SFT budget, chosen on {len(val)} validation items: {steps_2} steps at lr {lr_2:g} ({selection})", flush=True)

    # The candidates' SFT time counts once: the chosen one's is seed 0's SFT, counted in the loop below.
    sft_info, runs, compute_s = {}, {}, sum(r["sft_wall_s"] for r in selection if (r["steps"], r["lr"]) != (steps_2, lr_2))
    for seed in args.seeds:
        dirs = {
            "smol": sft_dir(runs_root, "smol", seed, args.sft_steps, args.sft_lr_first, args.sft_batch, len(val)),
            "bytes": sft_dir(runs_root, "bytes", seed, steps_2, lr_2, args.sft_batch, len(val)),
        }
        sft_info[seed] = {
            "smol": supervise(args.first_model, "+", seed, args.sft_steps, args.sft_lr_first, args, dirs["smol"], excluded),
            "bytes": supervise(args.second_model, "-", seed, steps_2, lr_2, args, dirs["bytes"], excluded),
        }
        compute_s += sft_info[seed]["smol"]["wall_s"] + sft_info[seed]["bytes"]["wall_s"]
        agents = {
            "smol": {"model": {"name": str(dirs["smol"].resolve())}, "lr": args.lr_first},
            "bytes": {"model": {"name": str(dirs["bytes"].resolve())}, "lr": args.lr_second},
        }
        for method in args.methods:
            run_dir = runs_root / f"seed{seed}-{method}"
            job = job_for(seed, method, agents, args)
            record = finished(run_dir, job) or run_once(run_dir, job)
            compute_s += record["wall_s"]
            summary = json.loads((run_dir / "summary.json").read_text())
            runs[(seed, method)] = read_run(run_dir, summary)
            print(f"seed {seed} {method}: before {summary.get('accuracy_before')} after {summary.get('accuracy_after')}", flush=True)

    names = ["smol", "bytes"]
    comparisons = compare(runs, names, args.seeds, args.methods)
    score = {m: statistics.fmean(runs[(s, m)]["after"][a] for s in args.seeds for a in names) for m in args.methods}
    report = {
        "command": shlex.join(["python", "benchmarks/hacpo_toy.py", *sys.argv[1:]]),
        "machine": machine_record(load_before),
        "wall_s": time.time() - t0,  # this invocation (a resumed one reuses finished runs)
        "compute_s": compute_s,  # every SFT and RL run, wherever it ran: the reproduction's cost
        "out": str(out),
        "config": {k: v for k, v in vars(args).items()},
        "sft": sft_info,
        "sft_selection": {"val_size": len(val), "val_seed": VALIDATION_SEED, "candidates": selection, "chosen": {"steps": steps_2, "lr": lr_2}},
        "before": {a: statistics.fmean(runs[(s, args.methods[0])]["before"][a] for s in args.seeds) for a in names},
        "after": {f"{s}/{m}": runs[(s, m)]["after"] for s, m in runs},
        "comparisons": comparisons,
        "ordering": ordering(score),
        "runs": {f"seed{s}-{m}": r for (s, m), r in runs.items()},
    }
    out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str))
    plot(runs, names, args.seeds, args.methods, out)
    out.with_suffix(".md").write_text(markdown(report, names, args.methods, args.seeds, runs))
    print(json.dumps({k: report[k] for k in ("before", "comparisons", "ordering", "wall_s")}, indent=2))


if __name__ == "__main__":
    main()
