"""Timeline merging at agent scale: one recorded pool of 12-call episodes replayed through off / token / text.

Record. One swarm server (SmolLM2-135M, exact histories on: the engine's default) serves `--prompts` x
`--group` episodes of `LedgerAgent`, a tool-using workflow of `--turns` LLM calls: the model adds a list
of numbers one at a time; after every reply the calculator's result comes back (a `tool` message answering
the model's tool call when it made one; SmolLM2-135M mostly writes plain text, and then the result arrives
as a user message labelled "calculator"); the last call asks for the total. Reward 1 when the last reply's
last integer is the total. Every call re-sends the whole conversation (system prompt with the tool schema,
the question, every earlier reply and result), as real agent loops do. The pool never trains during the
recording; its journal (`pool.journal.jsonl`) holds every episode at token level.

Replay. The same episodes go through the trainer's own `train_step` (engine.backends.torch.trainer: batch
building with merging, forward/backward, optimizer step) once per merge mode, from the same starting weights
and a fresh optimizer, in `--repeats` interleaved rounds (the mode order rotates each round). The modes
differ only in `training.merge`, so what is timed is what merging changes: the sampling is identical. One
optimizer step per update in every mode (the mini-batch holds every sample).

Fidelity. Before the timed rounds each mode's gradient on the same episodes is captured once: merging must
train on the same tokens with the same log-probs and advantages, so its gradient must equal merging off's
up to float rounding (cosine and relative L2 difference are reported). That is the strong form of "reward
curves that agree": the update itself is the same, so the next policy is the same.

    .venv/bin/python benchmarks/merging_replay.py                  # writes docs/benchmarks/merging_replay.{json,md,png}
    .venv/bin/python benchmarks/merging_replay.py --model tiny --turns 4 --prompts 1 --group 2 --repeats 1 \\
        --out runs/merging_replay_smoke                              # smoke
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import (  # noqa: E402
    CountingLLM,
    fmt_spread,
    loadavg,
    machine_record,
    rotated,
    spread,
)
from engine.backends.torch.trainer import TorchTrainer  # noqa: E402
from engine.client import run_episodes  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.jobs import ServerProcess  # noqa: E402
from engine.models.loader import load_model  # noqa: E402
from engine.tasks.base import Item, last_integer  # noqa: E402
from engine.tasks.calculator import TOOLS, tool_messages  # noqa: E402
from engine.tracking.merging import episode_samples  # noqa: E402
from engine.types import EpisodeResult  # noqa: E402

# "off-unshared": merging off and `training.share_prefix` off, the naive baseline (every call's sample
# forwarded whole); "off" keeps the engine's default of running a micro-batch's shared prefix once.
MODES = ("off", "token", "text", "off-unshared")
SYSTEM = "You are a careful assistant. Use the calculator tool for every addition and report each result."


class LedgerAgent:
    """Adds `turns - 1` numbers one call at a time with calculator results in between (module docstring)."""

    name = "ledger"

    def __init__(self, turns: int) -> None:
        if turns < 2:
            raise ValueError("turns must be at least 2")
        self.turns = turns

    def dataset(self, n: int, seed: int) -> list[Item]:
        rng = random.Random(seed)
        items = []
        for k in range(n):
            xs = [rng.randint(10, 99) for _ in range(self.turns - 1)]
            prompt = (
                "Add these numbers one at a time with the calculator, reporting the running total after "
                f"each step: {', '.join(map(str, xs))}."
            )
            items.append(Item(f"ledger{k}", prompt, sum(xs), {"xs": xs}))
        return items

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any], log: list[dict] | None = None) -> float:
        llm = CountingLLM(llm)
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item.prompt}]
        xs, total, reward = item.extra["xs"], 0, 0.0
        for turn in range(self.turns):
            msg = llm.chat.completions.create(model=model, messages=messages, tools=TOOLS, **sampling).choices[0].message
            if turn == self.turns - 1:
                reward = 1.0 if last_integer(msg.content or "") == item.answer else 0.0
                break
            x = xs[turn]
            line = f"calculator: {total} + {x} = {total + x}"
            total += x
            if turn == self.turns - 2:
                line += ". That was the last number: reply with just the final total."
            if msg.tool_calls:
                calls = [tc.model_dump() for tc in msg.tool_calls]
                messages.append({"role": "assistant", "content": msg.content or "", "tool_calls": calls})
                messages.extend(tool_messages(msg))
                messages.append({"role": "user", "content": line})
            else:
                messages.append({"role": "assistant", "content": msg.content or ""})
                messages.append({"role": "user", "content": line})
        if log is not None:
            log.append({"calls": llm.calls, "tool_calls": llm.tool_calls, "finish": llm.finish, "reward": reward})
        return reward


def base_config(args, run_dir: Path | None = None, mode: str = "off") -> SwarmConfig:
    return SwarmConfig.model_validate(
        {
            "model": {"name": args.model, "seed": args.seed},
            "algorithm": {"advantage": "grpo", "policy_loss": "ppo_clip", "agg": "token_mean", "kl_coef": 0.0},
            # batch_size above the number of tasks: the pool collects and never trains while recording
            "pool": {"policy": "task_count", "batch_size": args.prompts + 1, "group_size": args.group},
            "training": {
                "lr": args.lr,
                "checkpoint_every": 0,
                "merge": "off" if mode == "off-unshared" else mode,
                "share_prefix": mode != "off-unshared",
                "mini_batch_size": args.prompts * args.group * args.turns,
                "micro_batch_size": args.micro,
            },
            "episodes": {"max_context_tokens": args.max_context},
            "run_dir": None if run_dir is None else str(run_dir),
        }
    )


def record(args, work: Path) -> tuple[list[EpisodeResult], dict[str, Any]]:
    """Serve the episodes once; return them from the pool journal with the client-side call statistics."""
    agent = LedgerAgent(args.turns)
    items = agent.dataset(args.prompts, seed=args.seed)
    sampling = {"temperature": args.temperature, "max_tokens": args.max_tokens}
    run_dir = work / "record"
    run_dir.mkdir(parents=True)
    log: list[dict] = []
    server = ServerProcess(run_dir, log_path=run_dir / "server.log")
    t0 = time.perf_counter()
    try:
        with server.client() as client:
            client.configure(base_config(args, run_dir))
            client.start(wait=True)
            res = run_episodes(
                client,
                [it for it in items for _ in range(args.group)],
                lambda ep, it: agent.run(ep.openai(max_retries=0), ep.model, it, sampling, log),
                task_id=lambda it: it.id,
                concurrency=args.prompts * args.group,
                show_progress=True,
            )
            history = client.status().get("history", {})
    finally:
        server.stop()
    wall = time.perf_counter() - t0
    episodes = recorded_episodes(run_dir)
    finishes = [f for e in log for f in e["finish"]]
    stats = {
        "wall_s": wall,
        "episodes": len(episodes),
        "failures": len(res.failures),
        "mean_reward": statistics.fmean(e.reward for e in episodes) if episodes else None,
        "calls_per_episode": statistics.fmean(e["calls"] for e in log) if log else None,
        "episodes_with_tool_call": sum(1 for e in log if e["tool_calls"]),
        "replies": len(finishes),
        "replies_cut_by_max_tokens": finishes.count("length"),
        "history": history,
    }
    (run_dir / "stats.json").write_text(json.dumps(stats) + "\n")
    return episodes, stats


def recorded_episodes(run_dir: Path) -> list[EpisodeResult]:
    """The finished episodes in a recording's pool journal, in arrival order."""
    records = [json.loads(x) for x in (run_dir / "pool.journal.jsonl").read_text().splitlines() if x.strip()]
    return [EpisodeResult.from_dict(r["episode"]) for r in records if r.get("op") == "add"]


def nondegenerate(episodes: list[EpisodeResult], groups: int) -> tuple[list[EpisodeResult], bool]:
    """The first `groups` task groups whose rewards differ, and False; a group of equal rewards has zero
    advantages, and the fidelity check would compare two zero gradients. When no group's rewards differ
    (SmolLM2-135M may solve none), the first groups with rewards alternating 1, 0 within each group, and
    True: the merge modes must still agree on that update, which is what the check is about. The timing does
    not depend on the rewards (every sample is forwarded and back-propagated either way)."""
    by_task: dict[str, list[EpisodeResult]] = {}
    for e in episodes:
        by_task.setdefault(e.task_id, []).append(e)
    varied = [g for g in by_task.values() if len({e.reward for e in g}) > 1]
    if varied:
        return [e for g in varied[:groups] for e in g], False
    chosen = list(by_task.values())[:groups]
    return [replace(e, reward=float(k % 2 == 0)) for g in chosen for k, e in enumerate(g)], True


def merge_counts(episodes: list[EpisodeResult], mode: str) -> dict[str, Any]:
    """Samples per episode after merging (pure: the same function the trainer's batch building calls)."""
    per_ep = [len(episode_samples(e, "off" if mode == "off-unshared" else mode)) for e in episodes]
    return {
        "samples": sum(per_ep),
        "samples_per_episode": statistics.fmean(per_ep),
        "episodes_to_one_sample": sum(1 for k in per_ep if k == 1) / len(per_ep),
        "histogram": {str(k): per_ep.count(k) for k in sorted(set(per_ep))},
    }


class Replayer:
    """The trainer's update on fixed episodes, from the same weights each time (a fresh optimizer per run)."""

    def __init__(self, args) -> None:
        self.args = args
        loaded = load_model(base_config(args).model, device="cpu")
        self.model = loaded.model
        for p in self.model.parameters():
            p.requires_grad_(True)
        self.model.eval()
        self.pad_id = loaded.tokenizer.pad_token_id
        self.start = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def trainer(self, mode: str) -> TorchTrainer:
        self.model.load_state_dict(self.start)
        return TorchTrainer(self.model, self.pad_id, base_config(self.args, mode=mode))

    def gradient(self, mode: str, episodes: list[EpisodeResult]) -> tuple[torch.Tensor, dict[str, float]]:
        """The accumulated gradient of one update (captured before the optimizer step) and its metrics."""
        tr = self.trainer(mode)
        grads: list[torch.Tensor] = []
        step = tr.optimizer_step

        def capture() -> float:
            grads.append(torch.cat([p.grad.detach().flatten() for p in tr.params]))
            return step()

        tr.optimizer_step = capture  # type: ignore[method-assign]
        metrics = tr.train_step(list(episodes))
        return grads[0], metrics

    def timed(self, mode: str, episodes: list[EpisodeResult]) -> dict[str, float]:
        tr = self.trainer(mode)
        load = loadavg()[0]
        metrics = tr.train_step(list(episodes))
        return {**metrics, "load1_before": load}


def fidelity(rep: Replayer, episodes: list[EpisodeResult], modes: list[str]) -> dict[str, Any]:
    ref, ref_m = rep.gradient("off", episodes)
    out: dict[str, Any] = {"off": {"grad_norm": float(ref.double().norm()), "pg_loss": ref_m.get("pg_loss")}}
    for m in modes:
        if m == "off":
            continue
        g, met = rep.gradient(m, episodes)
        # float64: a float32 reduction over 135M entries rounds enough to put a cosine above 1
        g64, ref64 = g.double(), ref.double()
        denom = float(ref64.norm())
        out[m] = {
            "grad_norm": float(g64.norm()),
            "pg_loss": met.get("pg_loss"),
            "cosine_vs_off": float(g64 @ ref64) / (float(g64.norm()) * denom) if denom else None,
            "rel_l2_diff_vs_off": float((g64 - ref64).norm()) / denom if denom else None,
        }
        del g64, ref64
        del g
        print(f"fidelity {m}: {out[m]}", flush=True)
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = result["modes"]
    runs = result["runs"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for i, m in enumerate(modes):
        ts = [r["train_time_s"] for r in runs if r["mode"] == m]
        a.scatter([i] * len(ts), ts, color=f"C{i}", zorder=3)
        a.bar(i, statistics.median(ts), color=f"C{i}", alpha=0.4)
    a.set_xticks(range(len(modes)), modes)
    a.set_ylabel("update time, s (bar: median; dots: repeats)")
    a.set_title(f"actor update on the same {result['replayed_episodes']} episodes")
    spp = [result["merging"][m]["samples_per_episode"] for m in modes]
    b.bar(range(len(modes)), spp, color=[f"C{i}" for i in range(len(modes))])
    for i, m in enumerate(modes):
        s = result["speedup_vs_off"].get(m)
        if s and s["n"]:
            b.text(i, spp[i], f"{s['median']:.2f}x", ha="center", va="bottom")
    b.set_xticks(range(len(modes)), modes)
    b.set_ylabel("training samples per episode (label: update speed-up)")
    b.set_title(f"{result['args']['turns']} LLM calls per episode")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(result: dict[str, Any]) -> str:
    rec, modes = result["recording"], result["modes"]
    lines = [
        "| mode | samples per episode | episodes to 1 sample | tokens forwarded | update s (median of repeats) | speed-up vs off |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in modes:
        runs = [r for r in result["runs"] if r["mode"] == m]
        mc = result["merging"][m]
        lines.append(
            f"| {m} | {mc['samples_per_episode']:.2f} | {100 * mc['episodes_to_one_sample']:.0f}% | "
            f"{int(statistics.median(r['tokens'] for r in runs)):,} | "
            f"{statistics.median(r['train_time_s'] for r in runs):.1f} | {fmt_spread(result['speedup_vs_off'][m])} |"
        )
    fid = result["fidelity"]
    if not fid["off"]["grad_norm"]:
        same = "every replayed group has equal rewards: zero advantages, zero gradients, nothing to compare."
    else:
        same = (
            "; ".join(
                f"{m}: cosine {fid[m]['cosine_vs_off']:.6f}, relative L2 difference {fid[m]['rel_l2_diff_vs_off']:.1e}"
                for m in modes
                if m != "off"
            )
            + f" (off's gradient norm {fid['off']['grad_norm']:.4g})."
        )
    lines += [
        "",
        f"Recording: {rec['episodes']} episodes, {rec['calls_per_episode']:.1f} calls each, "
        f"{rec['replies_cut_by_max_tokens']}/{rec['replies']} replies cut by max_tokens, "
        f"{rec['episodes_with_tool_call']} episodes with a tool call, mean reward {rec['mean_reward']:.3f}; "
        f"re-sent replies {rec['history']}.",
        "",
        "Gradient of one update on the same episodes, against merging off: " + same
        + (" The recorded rewards were all equal, so for this check and the timed updates the replayed groups get "
           "rewards 1, 0, 1, 0 (see `nondegenerate`)." if result["rewards_substituted"] else ""),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--turns", type=int, default=12, help="LLM calls per episode")
    ap.add_argument("--prompts", type=int, default=3, help="tasks recorded (each a GRPO group)")
    ap.add_argument("--group", type=int, default=4, help="episodes per task")
    ap.add_argument("--replay-groups", type=int, default=1, help="task groups replayed (first with reward variance)")
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--max-context", type=int, default=4096)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--micro", type=int, default=2, help="micro-batch size of the update")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", nargs="+", default=["off", "token", "text"], choices=MODES)
    ap.add_argument("--work-dir", default="runs/merging_replay")
    ap.add_argument(
        "--reuse-recording", action="store_true", help="replay WORK_DIR/record from an earlier run instead of recording"
    )
    ap.add_argument("--out", default="docs/benchmarks/merging_replay", help="writes OUT.json, OUT.md, OUT.png")
    args = ap.parse_args()
    modes = ["off", *[m for m in args.modes if m != "off"]]  # off is the reference of every ratio
    work = Path(args.work_dir)
    if not args.reuse_recording:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    load_before = loadavg()
    t0 = time.perf_counter()

    if args.reuse_recording:
        recorded = recorded_episodes(work / "record")
        rec_stats = json.loads((work / "record" / "stats.json").read_text())
    else:
        recorded, rec_stats = record(args, work)
    print(f"recorded: {json.dumps(rec_stats)}", flush=True)
    episodes, substituted = nondegenerate(recorded, args.replay_groups)
    merging = {m: merge_counts(episodes, m) for m in modes}
    merging_all = {m: merge_counts(recorded, m) for m in modes}
    rep = Replayer(args)
    fid = fidelity(rep, episodes, modes)
    runs = []
    for r in range(args.repeats):
        for m in rotated(modes, r):
            met = rep.timed(m, episodes)
            runs.append({"repeat": r, "mode": m, **{k: met[k] for k in ("train_time_s", "samples", "tokens", "load1_before")}})
            print(f"repeat {r} {m:>5}: {met['train_time_s']:7.1f} s  {int(met['samples'])} samples  "
                  f"{int(met['tokens'])} tokens  load {met['load1_before']:.1f}", flush=True)
    speedup = {}
    for m in modes:
        ratios = []
        for r in range(args.repeats):
            off = next(x for x in runs if x["repeat"] == r and x["mode"] == "off")["train_time_s"]
            ratios.append(off / next(x for x in runs if x["repeat"] == r and x["mode"] == m)["train_time_s"])
        speedup[m] = spread(ratios)
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "args": vars(args),
        "machine": machine_record(load_before),
        "wall_s": time.perf_counter() - t0,
        "modes": modes,
        "recording": rec_stats,
        "replayed_episodes": len(episodes),
        "replayed_rewards": [e.reward for e in episodes],
        "rewards_substituted": substituted,
        "merging": merging,
        "merging_all_recorded": merging_all,
        "fidelity": fid,
        "runs": runs,
        "speedup_vs_off": speedup,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    plot(result, out.with_suffix(".png"))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
