"""Who is the spy on SmolLM2-135M through vibe: the offline game template, checked, trained, evaluated.

What a new user does with the spy prompt and no LLM endpoint, minus tmux: `vibe new` picks the `game`
template (one shared model plays civilians and spies, each role its own GRPO groups), `vibe check` must
pass, then the same client process `vibe train` runs in its tmux window (`vibe.training_loop.train`) trains
`--steps` steps, optionally after a supervised warm start on the gold descriptions (`--warm-start N`).
Per step the trainer writes the reward and its components (win, and the description score the probes
test), overall and per role, to rewards.jsonl; this script plots them.

Then it evaluates the base model, the warm start and the last RL checkpoint on the same questions: 16
sampled first-speaker descriptions per word, on the training words and on the held-out test words, with
t intervals over words (`--eval-only` reruns just that; `--report-only` rewrites the page from OUT.json).

    .venv/bin/python benchmarks/spy_game.py --steps 15 --warm-start 10 --out docs/benchmarks/spy_game

One run, one seed: intervals are over words within the run, not over seeds. The committed run, and what
it shows: docs/benchmarks/spy_game.md.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import shutil
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis.stats import t_interval  # noqa: E402
from benchmarks.common import loadavg, machine_record  # noqa: E402
from engine.client.runner import run_episodes  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.jobs import ServerProcess  # noqa: E402
from engine.tasks.spy import FIRST, LAST, describe_prompt, says_word  # noqa: E402
from vibe.check import check  # noqa: E402
from vibe.config import VibeJob  # noqa: E402
from vibe.data_writer import write_data  # noqa: E402
from vibe.jsonl import read_jsonl  # noqa: E402
from vibe.layout import CONFIG_FILE, REWARD_FILE, TEST_FILE, TRAIN_FILE, ClientDir  # noqa: E402
from vibe.loader import load_module  # noqa: E402
from vibe.progress import read_rewards  # noqa: E402
from vibe.templates import Family, copy_template  # noqa: E402
from vibe.training_loop import train  # noqa: E402

EVAL_SAMPLES = 16  # replies per word and model
EVAL_SEED = {"train": 1, "test": 2}  # names and ids in the evaluation's questions, the same for every model


def eval_items(tasks: list[dict], split: str, samples: int) -> list[dict]:
    """`samples` first-speaker questions per word of `tasks`, each with a fresh name and id (the game's own
    prompt: engine.tasks.spy.describe_prompt). A task's player count does not change that question, so the
    tasks of one word are one evaluation unit. Scored as a first speaker: no earlier descriptions to copy."""
    rng = random.Random(EVAL_SEED[split])
    by_word: dict[str, dict] = {}
    for t in tasks:
        by_word.setdefault(t["word"], {**t, "decoys": []})
    return [
        {"split": split, "word": w, "task": t,
         "prompt": describe_prompt(f"{rng.choice(FIRST)} {rng.choice(LAST)}", f"P{rng.randrange(100, 1000)}0", w, 1, [])}
        for w, t in by_word.items() for _ in range(samples)
    ]


def describe_scores(model: str, items: list[dict], score, sampling: dict, log_path: Path) -> list[dict]:
    """Every item's reply from `model`, served by a swarm server and sampled as in training, with its
    description score (the client's reward.score) and whether it said the secret word."""
    out: list[dict | None] = [None] * len(items)

    def one(ep, pair: tuple[int, dict]) -> float:
        i, item = pair
        reply = ep.openai(max_retries=0).chat.completions.create(
            model=ep.model, messages=[{"role": "user", "content": item["prompt"]}], **sampling).choices[0].message.content
        text = " ".join((reply or "").split())[:200]  # as the game keeps a description
        out[i] = {"split": item["split"], "word": item["word"], "reply": text,
                  "score": float(score(item["task"], text)["description"]), "said_word": says_word(text, item["word"])}
        return out[i]["score"]

    server = ServerProcess(None, log_path=log_path)
    try:
        with server.client() as client:
            client.configure(SwarmConfig(model={"name": model}))
            client.start(wait=True)
            res = run_episodes(client, list(enumerate(items)), one, task_id=lambda p: f"eval:{p[1]['word']}:{p[0]}",
                               concurrency=8, is_eval=True, show_progress=False)
    finally:
        server.stop()
    if res.failures:
        raise SystemExit(f"{len(res.failures)} evaluation replies failed; first: {res.failures[0]}")
    return [r for r in out if r is not None]


def per_word(rows: list[dict], key: str = "score") -> dict[str, float]:
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["word"], []).append(float(r[key]))
    return {w: sum(v) / len(v) for w, v in by.items()}


def t_ci(values: list[float]) -> dict:
    """Mean, t 95% interval and count of `values`, as the report stores them."""
    iv = t_interval(values)
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n}


def paired(a: dict[str, float], b: dict[str, float]) -> dict:
    """mean of a - b over the words both have, with its t 95% interval (words are the unit: few, so t)."""
    return t_ci([a[w] - b[w] for w in sorted(a) if w in b])


def evaluate(root: Path, run_dir: Path, samples: int) -> dict:
    """Description skill of the base model, the warm start and the last RL checkpoint on the training words
    and the held-out test words (never trained on, neither in the warm start nor in RL)."""
    job = VibeJob.load(root / CONFIG_FILE)
    score = load_module(root, REWARD_FILE).score
    ckpts = run_dir / "checkpoints"
    last = (ckpts / "latest").read_text().strip()
    models = {"base": job.swarm.model.name, "warm start": str((run_dir / "warm_start").resolve()),
              f"RL ({last})": str((ckpts / last / "model").resolve())}
    if not (run_dir / "warm_start").is_dir():
        del models["warm start"]
    items = [*eval_items(read_jsonl(root / TRAIN_FILE)[0], "train", samples),
             *eval_items(read_jsonl(root / TEST_FILE)[0], "test", samples)]
    scored = {}
    for name, model in models.items():
        print(f"[eval] {name}: {len(items)} replies", flush=True)
        scored[name] = describe_scores(model, items, score, job.sampling, run_dir / f"eval-{name.split()[0]}.log")
    table: dict = {}
    for split in ("train", "test"):
        words = {n: per_word([r for r in rows if r["split"] == split]) for n, rows in scored.items()}
        said = {n: per_word([r for r in rows if r["split"] == split], "said_word") for n, rows in scored.items()}
        names = list(models)
        table[split] = {
            "words": sorted(next(iter(words.values()))),
            "models": {n: {"score": t_ci(list(words[n].values())), "said_word": t_ci(list(said[n].values())),
                           "per_word": words[n]} for n in names},
            "differences": {f"{b} - {a}": paired(words[b], words[a]) for a, b in zip(names, names[1:], strict=False)},
        }
    return {"samples_per_word": samples, "models": models, "splits": table,
            "replies": {n: rows[:: max(1, samples // 2)] for n, rows in scored.items()}}  # a few, to read


def task_period(n_tasks: int, batch: int) -> int:
    """Steps until the trainer plays the same tasks again: step s plays tasks s*B .. s*B+B-1 (mod n)."""
    return n_tasks // math.gcd(n_tasks, batch)


def same_tasks_later(rewards: list[dict], period: int, component: str = "describe") -> dict | None:
    """The step-by-step change of `component` between a step and the step `period` later, which plays the
    same tasks (new games): the per-step curve's own paired comparison, with its t 95% interval."""
    by = {r["step"]: r["components"][component]["mean"] for r in rewards
          if not r.get("replayed") and component in r["components"]}
    pairs = [(s, s + period) for s in sorted(by) if s + period in by]
    if len(pairs) < 2:
        return None
    return {"component": component, "period": period, "pairs": pairs, **t_ci([by[b] - by[a] for a, b in pairs]),
            "earlier": sum(by[a] for a, _ in pairs) / len(pairs), "later": sum(by[b] for _, b in pairs) / len(pairs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warm-start", type=int, default=0, help="supervised steps on the gold descriptions first")
    ap.add_argument("--client", default="runs/spy_game/client", help="where the client folder is written (fresh)")
    ap.add_argument("--out", default="docs/benchmarks/spy_game", help="writes OUT.json, OUT.md and OUT.png")
    ap.add_argument("--samples", type=int, default=EVAL_SAMPLES, help="evaluation replies per word and model")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue a stopped run in --client from its last checkpoint (no new client, no second check)",
    )
    mode.add_argument("--eval-only", action="store_true",
                      help="evaluate the finished run in --client and rewrite OUT from OUT.json (no training)")
    mode.add_argument("--report-only", action="store_true", help="rewrite OUT.md and OUT.png from OUT.json")
    args = ap.parse_args()
    root, out = Path(args.client), Path(args.out)
    run_dir = root / ".vibe" / "train"
    command = shlex.join(["python", "benchmarks/spy_game.py", *sys.argv[1:]])
    if args.report_only:
        if not out.with_suffix(".json").exists():
            raise SystemExit(f"--report-only needs {out}.json: train (and evaluate) first")
        result = json.loads(out.with_suffix(".json").read_text())
    elif args.eval_only:
        if not out.with_suffix(".json").exists() or not (run_dir / "checkpoints" / "latest").exists():
            raise SystemExit(f"--eval-only needs {out}.json and a trained run in {run_dir}: train first")
        result = json.loads(out.with_suffix(".json").read_text())
    else:
        result = train_run(args, root, run_dir, command)
    if not args.report_only:
        load_before = loadavg()
        t0 = time.time()
        result["eval"] = evaluate(root, run_dir, args.samples)
        result["eval"].update(command=command, machine=machine_record(load_before), wall_s=time.time() - t0)
    if "period" not in result:  # recorded from the client folder (older records lack it)
        job = VibeJob.load(root / CONFIG_FILE)
        result["period"] = task_period(len(read_jsonl(root / TRAIN_FILE)[0]), job.swarm.pool.batch_size)
    result["same_tasks_later"] = same_tasks_later(result["rewards"], result["period"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    plot(result, out.with_suffix(".png"))
    out.with_suffix(".md").write_text(markdown(result, out))
    print(f"wrote {out}.json, {out}.md, {out}.png")


def train_run(args, root: Path, run_dir: Path, command: str) -> dict:
    """Write and check the client (unless resuming), train it as `vibe train` does; the run's record."""
    load_before = loadavg()
    check_s = None
    if args.resume:
        if not (root / ".vibe" / "check.json").exists():
            raise SystemExit(f"nothing to resume in {root}: run without --resume first")
        print((root / ".vibe" / "check.txt").read_text(), flush=True)  # the check the run passed
    else:
        shutil.rmtree(root, ignore_errors=True)
        copy_template(Family.GAME, root)
        write_data(ClientDir.open(root))
        t0 = time.time()
        report = check(root)
        print(report.render(), flush=True)
        if not report.passed:
            raise SystemExit("vibe check does not pass on the game template; nothing to train")
        check_s = time.time() - t0
    run_dir.mkdir(parents=True, exist_ok=True)
    t1 = time.time()
    train(root, run_dir, args.steps, args.warm_start)
    job = VibeJob.load(root / CONFIG_FILE)
    return {
        "command": command,
        "machine": machine_record(load_before),
        "period": task_period(len(read_jsonl(root / TRAIN_FILE)[0]), job.swarm.pool.batch_size),
        "check_s": check_s,  # None when resumed (the first invocation ran the check)
        "resumed": args.resume,
        "train_s": time.time() - t1,
        "config": (root / "vibe.yaml").read_text(),
        "rewards": read_rewards(run_dir),
    }


MODEL_COLORS = {"base": "C7", "warm start": "C0"}


def plot(result: dict, path: Path) -> None:
    rewards = [r for r in result["rewards"] if not r.get("replayed")]
    steps = [r["step"] for r in rewards]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    lines = {"describe (both roles)": [r["components"].get("describe", {}) for r in rewards]}
    for role in ("civilian", "spy"):
        lines[f"describe ({role})"] = [r.get("roles", {}).get(role, {}).get("describe", {}) for r in rewards]
    lines["win (civilian)"] = [r.get("roles", {}).get("civilian", {}).get("win", {}) for r in rewards]
    for i, (name, stats) in enumerate(lines.items()):
        mean = [s.get("mean", float("nan")) for s in stats]
        style = {"marker": "o", "color": f"C{i}", "label": name, "lw": 2 if i == 0 else 1}
        if i in (1, 2):
            style.update(ls="--", marker=".")
        ax.plot(steps, mean, **style)
    ax.set(xlabel="RL step (after the warm start)", ylabel="reward component, mean over the step's episodes",
           title="Per step while training (2 word pairs x 4 games a step)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ev = result.get("eval")
    if ev:
        names = list(ev["models"])
        width = 0.8 / len(names)
        for j, name in enumerate(names):
            for k, split in enumerate(("train", "test")):
                m = ev["splits"][split]["models"][name]["score"]
                bx.bar(k + (j - (len(names) - 1) / 2) * width, m["mean"], width, color=MODEL_COLORS.get(name, "C3"),
                       label=name if k == 0 else None, yerr=[[m["mean"] - m["lo"]], [m["hi"] - m["mean"]]], capsize=3)
        bx.set_xticks([0, 1], [f"training words ({len(ev['splits']['train']['words'])})",
                               f"held-out words ({len(ev['splits']['test']['words'])})"])
        bx.set(ylabel="description score (0-1), mean over words",
               title=f"First-speaker descriptions, {ev['samples_per_word']} samples/word\n(bars: t 95% over words)")
        bx.set_ylim(0, 1)
        bx.grid(alpha=0.3, axis="y")
        bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _ci(d: dict, signed: bool = False, digits: int = 2) -> str:
    fmt = f"+.{digits}f" if signed else f".{digits}f"
    if d["lo"] == float("-inf"):  # every word scored the same: t gives no interval
        return f"{d['mean']:{fmt}} (no spread)"
    return f"{d['mean']:{fmt}} [{d['lo']:{fmt}}, {d['hi']:{fmt}}]"


def markdown(result: dict, out: Path) -> str:
    rows = ["| step | reward mean | sd | describe | describe civilian | describe spy | civilians won | groups without variance |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rewards"]:
        roles = r.get("roles", {})

        def comp(stats: dict, key: str) -> str:
            return f"{stats[key]['mean']:.3f}" if key in stats else "-"

        wins = [roles.get(side, {}).get("win", {}).get("mean") for side in ("civilian", "spy")]
        # one side wins each game, with the same win reward: the civilians' share of the two win means
        won = "-" if None in wins or sum(wins) == 0 else f"{wins[0] / sum(wins):.2f}"
        rows.append(f"| {r['step']}{' (replayed)' if r.get('replayed') else ''} | {r['reward_mean']:.3f} | "
                    f"{r['reward_std']:.3f} | {comp(r['components'], 'describe')} | "
                    f"{comp(roles.get('civilian', {}), 'describe')} | {comp(roles.get('spy', {}), 'describe')} | "
                    f"{won} | {r['flat_groups']}/{r['groups']} |")
    checked = "passed earlier" if result["check_s"] is None else f"{result['check_s']:.0f} s"
    resumed = " (the last invocation, resumed from a checkpoint)" if result["resumed"] else ""
    lines = [
        "# Who is the spy on SmolLM2-135M through vibe", "",
        f"Command: `{result['command']}`", "",
        f"Machine: {result['machine']['processor']}, {result['machine']['cpu_count']} cores, torch "
        f"{result['machine']['torch']}; vibe check {checked}, warm start and training {result['train_s'] / 60:.1f} "
        f"min{resumed} (SmolLM2 plays every seat; one run, one seed).", "",
        "The offline `game` template as `vibe new` writes it (config below), checked by `vibe check`, then trained by "
        "the client process of `vibe train`. Components as the client reports them: `win` is 0.5 for the winning "
        "side, `describe` 0.5 x the description score; 'civilians won' is the share of games.", "",
        *rows, "",
        f"![reward per step, and the evaluation]({out.name}.png)", "",
    ]
    later = result.get("same_tasks_later")
    if later:
        lines += [f"Step s and step s + {later['period']} play the same tasks (new games, names and seats). Over the "
                  f"{len(later['pairs'])} such pairs the mean `{later['component']}` component went from "
                  f"{later['earlier']:.3f} to {later['later']:.3f}: paired change {_ci(later, signed=True, digits=3)} "
                  "(t 95% over the pairs).", ""]
    ev = result.get("eval")
    if ev:
        lines += [f"## Evaluation: `{ev['command']}`", "",
                  f"{ev['samples_per_word']} sampled first-speaker descriptions per word and model (the game's question, "
                  "fresh names, the training temperature), scored by the client's `reward.score`; intervals are t 95% "
                  f"over words. {ev['wall_s'] / 60:.1f} min.", "",
                  "| words | model | description score | said the word |", "|---|---|---:|---:|"]
        for split, label in (("train", "training"), ("test", "held-out")):
            for name, m in ev["splits"][split]["models"].items():
                lines.append(f"| {label} | {name} | {_ci(m['score'])} | {_ci(m['said_word'])} |")
        lines += ["", "| words | difference (paired by word) | mean [t 95%] |", "|---|---|---:|"]
        for split, label in (("train", "training"), ("test", "held-out")):
            for name, d in ev["splits"][split]["differences"].items():
                lines.append(f"| {label} ({d['n']}) | {name} | {_ci(d, signed=True)} |")
        lines.append("")
    return "\n".join([*lines, "```yaml", result["config"].rstrip(), "```", ""])


if __name__ == "__main__":
    main()
