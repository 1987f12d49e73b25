"""Timeline merging on the multi-turn calculator task: actor-update time with training.merge = off / token / text.

Three swarm servers (one per merge mode, otherwise identical config and model seed) are alive at once and
are driven in turn, step by step (the order rotates every step), by the same client code on the same data:
step k of every mode gets the same B calculator items x G episodes. Only one server computes at a time, so
load from other jobs on the machine hits the three modes alike. Reported per mode and step, from each
server's `metrics.jsonl`: `train_time_s` (the actor update: batch building with merging, forward/backward,
optimizer step), `samples` (training sequences after merging), `tokens` (tokens the update forwards),
`reward_mean`; from the client: LLM calls per episode, tool calls, replies cut by max_tokens.

The agent. `--probe N` first runs the built-in `CalculatorAgent` (engine/tasks/calculator.py) for N eval
episodes and counts its calls: SmolLM2-135M mostly answers without a `<tool_call>`, so the built-in agent
ends after one call and there is nothing to merge. The benchmark therefore uses `WorkflowCalculator`, a fixed
multi-turn workflow over the same items and tools: every episode makes exactly `--turns` LLM calls; after
each call the environment answers with the tool results when the model called the calculator, otherwise with
a follow-up user message (what the calculator returns for the expression; finally "reply with just the final
number"). Reward 1 when the last reply's last integer is a * b + c. (`--hard` withholds the result: the
hints only give a * b and the model must add c itself; SmolLM2-135M then never earns a reward.) Every call re-sends the whole conversation (system prompt with the tool
schema, earlier replies), so the calls of an episode share prefixes, as in real agent loops.

    python benchmarks/merging_update.py --steps 0 --probe 16       # only: does the built-in agent make >1 call?
    python benchmarks/merging_update.py       # probe, then 2 items x G=4, 3 calls of <=96 tokens, 4 steps
    python benchmarks/merging_update.py --model tiny --steps 2 --prompts 1 --group 2 --out-dir runs/m   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import CountingLLM, cpu_seconds, loadavg, machine_record  # noqa: E402
from engine.client import run_episodes  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.jobs import ServerProcess  # noqa: E402
from engine.tasks.base import Item, last_integer  # noqa: E402
from engine.tasks.calculator import TOOLS, CalculatorAgent, tool_messages  # noqa: E402

MODES = ("off", "token", "text")


class CallLog:
    """Per-episode call statistics, appended from the runner's worker threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.episodes: list[dict[str, Any]] = []

    def add(self, rec: dict[str, Any]) -> None:
        with self.lock:
            self.episodes.append(rec)

    def drain(self) -> list[dict[str, Any]]:
        with self.lock:
            out, self.episodes = self.episodes, []
        return out


class WorkflowCalculator(CalculatorAgent):
    """The calculator task as a fixed `turns`-call workflow (see the module docstring)."""

    name = "calculator-workflow"

    def __init__(self, turns: int = 3, log: CallLog | None = None, hard: bool = False) -> None:
        super().__init__(max_turns=turns)
        self.turns = turns
        self.log = log
        self.hard = hard

    @staticmethod
    def _operands(item: Item) -> tuple[int, int, int]:
        ab, c = item.id.split("+")
        a, b = ab.split("*")
        return int(a), int(b), int(c)

    def follow_up(self, item: Item, turn: int) -> str:
        """The user message after call `turn` (0-based) when the model made no tool call: first what the
        calculator returns for the expression, at the end a request for the bare number. The model only has
        to relay the result, so a 135M model earns some reward and GRPO groups are not all zero."""
        a, b, c = self._operands(item)
        if self.hard:
            if turn == self.turns - 2:
                return f"Now give the final answer to {a} * {b} + {c}. Reply with just the number."
            hints = [
                f"The calculator says {a} * {b} = {a * b}.",
                f"And {a * b} + {c} = ? Think step by step.",
            ]
            return hints[min(turn, len(hints) - 1)]
        if turn == self.turns - 2:
            return "Now reply with just the final number."
        if turn == 0:
            return f"The calculator says {a} * {b} = {a * b}, and {a * b} + {c} = {a * b + c}."
        return "Check the calculation once more."

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        llm = CountingLLM(llm)
        messages: list[dict[str, Any]] = [{"role": "user", "content": item.prompt}]
        reward = 0.0
        for turn in range(self.turns):
            out = llm.chat.completions.create(model=model, messages=messages, tools=TOOLS, **sampling)
            msg = out.choices[0].message
            if turn == self.turns - 1:
                reward = 1.0 if last_integer(msg.content) == item.answer else 0.0
                break
            if msg.tool_calls:
                messages.append(
                    {
                        "role": "assistant",
                        "content": msg.content or "",
                        "tool_calls": [tc.model_dump() for tc in msg.tool_calls],
                    }
                )
                messages.extend(tool_messages(msg))
            else:
                messages.append({"role": "assistant", "content": msg.content or ""})
                messages.append({"role": "user", "content": self.follow_up(item, turn)})
        if self.log is not None:
            self.log.add(
                {"calls": llm.calls, "tool_calls": llm.tool_calls, "finish": llm.finish, "reward": reward}
            )
        return reward


def probe_builtin(args) -> dict[str, Any]:
    """Run the built-in CalculatorAgent for `args.probe` eval episodes and count its LLM calls."""
    agent = CalculatorAgent()
    items = agent.dataset(args.probe, seed=10_000 + args.seed)
    stats: list[dict[str, Any]] = []
    sampling = {"temperature": args.temperature, "max_tokens": args.max_tokens}
    run_dir = Path(args.work_dir) / "probe"
    run_dir.mkdir(parents=True)
    server = ServerProcess(run_dir, log_path=run_dir / "server.log")
    try:
        with server.client() as client:
            client.configure(
                SwarmConfig.model_validate(
                    {"model": {"name": args.model, "seed": args.seed}, "run_dir": str(run_dir)}
                )
            )
            client.start(wait=True)

            def one(ep, it):
                llm = CountingLLM(ep.openai(max_retries=0))
                r = agent.run(llm, ep.model, it, sampling)
                stats.append(
                    {"calls": llm.calls, "tool_calls": llm.tool_calls, "finish": llm.finish, "reward": r}
                )
                return r

            run_episodes(
                client,
                items,
                one,
                task_id=lambda it: "probe:" + it.id,
                concurrency=len(items),
                is_eval=True,
                show_progress=False,
            )
    finally:
        server.stop()
    calls = [s["calls"] for s in stats]
    return {
        "episodes": len(stats),
        "calls_per_episode_mean": statistics.fmean(calls) if calls else None,
        "calls_histogram": {str(k): calls.count(k) for k in sorted(set(calls))},
        "episodes_with_tool_call": sum(1 for s in stats if s["tool_calls"]),
        "finish_reasons": {
            f: sum(s["finish"].count(f) for s in stats) for f in {f for s in stats for f in s["finish"]}
        },
        "mean_reward": statistics.fmean(s["reward"] for s in stats) if stats else None,
    }


def swarm_config(args, mode: str, run_dir: Path) -> SwarmConfig:
    return SwarmConfig.model_validate(
        {
            "model": {"name": args.model, "seed": args.seed},
            "algorithm": {
                "advantage": "grpo",
                "policy_loss": "ppo_clip",
                "agg": "token_mean",
                "kl_coef": 0.0,
            },
            "pool": {"policy": "task_count", "batch_size": args.prompts, "group_size": args.group},
            # One optimizer step per training step in every mode: the mini-batch holds all samples, even
            # unmerged ones (prompts * group * turns), so modes differ only in what the update forwards.
            "training": {
                "lr": args.lr,
                "max_steps": args.steps,
                "checkpoint_every": 0,
                "merge": mode,
                "mini_batch_size": max(args.micro, args.prompts * args.group * args.turns),
                "micro_batch_size": args.micro,
                "share_prefix": not args.no_share_prefix,
            },
            "run_dir": str(run_dir),
        }
    )


def run_benchmark(args) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """Returns per-mode step records and the error that stopped the run early, if any (the steps every
    mode completed before it are kept, so a crash of one server still leaves a fair comparison)."""
    work = Path(args.work_dir)
    modes = args.modes
    log = CallLog()
    agent = WorkflowCalculator(turns=args.turns, log=log, hard=args.hard)
    items = agent.dataset(args.prompts * args.steps, seed=args.seed)
    sampling = {"temperature": args.temperature, "max_tokens": args.max_tokens}
    servers: dict[str, ServerProcess] = {}
    clients = {}
    per_step: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    error = None
    try:
        for m in modes:
            d = work / m
            d.mkdir(parents=True)
            servers[m] = ServerProcess(d, log_path=d / "server.log")
            clients[m] = servers[m].client()
            clients[m].configure(swarm_config(args, m, d))
            clients[m].start(wait=False)
        for m in modes:
            clients[m].wait_for_state({"ROLLING"}, timeout=600)
        for step in range(args.steps):
            batch = items[step * args.prompts : (step + 1) * args.prompts]
            episodes = [it for it in batch for _ in range(args.group)]
            order = modes[step % len(modes) :] + modes[: step % len(modes)]
            for m in order:
                log.drain()
                load = os.getloadavg()[0]
                proc = psutil.Process(servers[m].proc.pid)
                c0 = cpu_seconds(proc)
                t0 = time.perf_counter()
                res = run_episodes(
                    clients[m],
                    episodes,
                    lambda ep, it: agent.run(ep.openai(max_retries=0), ep.model, it, sampling),
                    task_id=lambda it, s=step: f"s{s}:{it.id}",
                    concurrency=len(episodes),
                    show_progress=False,
                )
                t1 = time.perf_counter()
                c1 = cpu_seconds(proc)
                clients[m].wait_for_step(step + 1, timeout=3600)
                t2 = time.perf_counter()
                c2 = cpu_seconds(proc)
                eps = log.drain()
                finishes = [f for e in eps for f in e["finish"]]
                per_step[m].append(
                    {
                        "step": step + 1,
                        "gen_s": t1 - t0,
                        "wait_s": t2 - t1,
                        # server CPU seconds (all threads) while it served the episodes / while it trained
                        "server_cpu_gen_s": c1 - c0,
                        "server_cpu_train_s": c2 - c1,
                        "load1": load,
                        "client_mean_reward": res.mean_reward,
                        "failures": len(res.failures),
                        "calls_per_episode": statistics.fmean(e["calls"] for e in eps) if eps else None,
                        "episodes_with_tool_call": sum(1 for e in eps if e["tool_calls"]),
                        "replies": len(finishes),
                        "replies_cut_by_max_tokens": finishes.count("length"),
                        "server_rss_gb": proc.memory_info().rss / 1e9,
                    }
                )
                print(
                    f"step {step + 1} {m:>5}: gen {t1 - t0:6.1f}s  wait/train {t2 - t1:6.1f}s  "
                    f"reward {res.mean_reward:.3f}  load {load:.1f}",
                    flush=True,
                )
    except Exception:  # noqa: BLE001 - e.g. a server killed by the OOM killer: keep the completed steps
        error = traceback.format_exc()
        print(error, file=sys.stderr)
    finally:
        for c in clients.values():
            c.close()
        for s in servers.values():
            s.stop()
    done = min(len(v) for v in per_step.values())
    per_step = {m: v[:done] for m, v in per_step.items()}
    for m in modes:
        path = work / m / "metrics.jsonl"
        metrics = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        for rec, met in zip(per_step[m], metrics, strict=False):
            rec.update(
                train_time_s=met["train_time_s"],
                samples=met["samples"],
                episodes=met["episodes"],
                samples_per_episode=met["samples"] / met["episodes"],
                tokens=met["tokens"],
                reward=met["reward_mean"],
                pg_loss=met.get("pg_loss"),
                clip_frac=met.get("clip_frac"),
                ratio_mean=met.get("ratio_mean"),
                grad_norm=met.get("grad_norm"),
            )
    return per_step, error


def summarise(per_step: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out = {}
    for m, steps in per_step.items():

        def mean(key, steps=steps):
            vals = [s[key] for s in steps if s.get(key) is not None]
            return statistics.fmean(vals) if vals else None

        out[m] = {
            "train_time_s_mean": mean("train_time_s"),
            "train_time_s_steady_mean": statistics.fmean(s["train_time_s"] for s in steps[1:])
            if len(steps) > 1
            else None,
            "samples_per_episode": mean("samples_per_episode"),
            "tokens_per_step": mean("tokens"),
            "calls_per_episode": mean("calls_per_episode"),
            "gen_s_mean": mean("gen_s"),
            "server_rss_gb_max": max((s["server_rss_gb"] for s in steps), default=None),
            "server_cpu_train_s_mean": mean("server_cpu_train_s"),
            "reward_curve": [s.get("reward") for s in steps],
            "mean_reward": mean("reward"),
            "cut_by_max_tokens": sum(s["replies_cut_by_max_tokens"] for s in steps)
            / max(1, sum(s["replies"] for s in steps)),
            "episodes_with_tool_call": sum(s["episodes_with_tool_call"] for s in steps),
            "ratio_mean": mean("ratio_mean"),
        }
    if "off" in out:
        for m in out:
            base, t = out["off"]["train_time_s_mean"], out[m]["train_time_s_mean"]
            out[m]["update_speedup_vs_off"] = base / t if base and t else None
            bc, tc = out["off"]["server_cpu_train_s_mean"], out[m]["server_cpu_train_s_mean"]
            out[m]["update_cpu_speedup_vs_off"] = bc / tc if bc and tc else None
            bt, tt = out["off"]["tokens_per_step"], out[m]["tokens_per_step"]
            out[m]["token_reduction_vs_off"] = bt / tt if bt and tt else None
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, steps = result["summary"], result["steps"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4))
    colors = {"off": "tab:gray", "token": "tab:blue", "text": "tab:orange"}
    for m, rec in steps.items():
        x = [s["step"] for s in rec]
        ax1.plot(x, [s["reward"] for s in rec], marker="o", color=colors[m], label=m)
        ax2.plot(x, [s["train_time_s"] for s in rec], marker="o", color=colors[m], label=m)
    ax1.set(xlabel="training step", ylabel="mean reward", title="reward per step (calculator workflow)")
    ax2.set(xlabel="training step", ylabel="seconds", title="actor update time per step (train_time_s)")
    ax1.legend()
    ax2.legend()
    names = list(summary)
    vals = [summary[m]["train_time_s_mean"] for m in names]
    cpus = [summary[m].get("server_cpu_train_s_mean") or 0 for m in names]
    x = list(range(len(names)))
    w = 0.38
    ax3.bar([i - w / 2 for i in x], vals, w, color=[colors[m] for m in names], label="wall train_time_s")
    ax3.bar(
        [i + w / 2 for i in x],
        cpus,
        w,
        color=[colors[m] for m in names],
        alpha=0.45,
        hatch="//",
        label="server CPU s while training",
    )
    for i, m in enumerate(names):
        sp = summary[m].get("update_speedup_vs_off")
        ax3.text(
            i - w / 2,
            vals[i],
            f"{vals[i]:.0f}\n{sp:.2f}x" if sp else f"{vals[i]:.0f}",
            ha="center",
            va="bottom",
        )
        cp = summary[m].get("update_cpu_speedup_vs_off")
        ax3.text(
            i + w / 2,
            cpus[i],
            f"{cpus[i]:.0f}\n{cp:.2f}x" if cp else f"{cpus[i]:.0f}",
            ha="center",
            va="bottom",
        )
    ax3.set_xticks(x, names)
    ax3.set(ylabel="seconds per step (mean)", title="actor update (speed-up vs off)")
    ax3.set_ylim(0, max(vals + cpus) * 1.35)
    ax3.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--prompts", type=int, default=2, help="B: calculator items per step")
    p.add_argument("--group", type=int, default=4, help="G: episodes per item")
    p.add_argument("--turns", type=int, default=3, help="LLM calls per episode of the workflow agent")
    p.add_argument(
        "--no-share-prefix",
        action="store_true",
        help="training.share_prefix off in every mode: each sample's prompt is forwarded on its own",
    )
    p.add_argument("--hard", action="store_true", help="follow-ups withhold the final result (see above)")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument(
        "--micro", type=int, default=2, help="sequences per forward/backward (memory: ~450-token samples)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--server-threads",
        type=int,
        default=None,
        help="OMP_NUM_THREADS for the servers (default: torch's default, one per core). On a machine "
        "oversubscribed by other jobs, 1 avoids OpenMP stalls that slow decoding by 10x or more",
    )
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument(
        "--probe", type=int, default=16, help="episodes of the built-in agent to count calls (0: skip)"
    )
    p.add_argument("--work-dir", default="runs/merging_update")
    p.add_argument("--out-dir", default="docs/benchmarks")
    p.add_argument("--name", default="merging")
    args = p.parse_args()
    args.modes = tuple(args.modes)
    if args.server_threads:
        os.environ["OMP_NUM_THREADS"] = str(args.server_threads)  # inherited by the server subprocesses

    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    load_before = loadavg()
    probe = probe_builtin(args) if args.probe else None
    if probe:
        print("built-in CalculatorAgent probe:", json.dumps(probe), flush=True)
    steps, error = run_benchmark(args) if args.steps else ({}, None)
    result = {
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "machine": machine_record(load_before),
        "server_threads": args.server_threads or "torch default (2 on this machine)",
        "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()},
        "wall_s": time.time() - t_start,
        "builtin_agent_probe": probe,
        "error": error,
        "summary": summarise(steps) if steps and all(steps.values()) else None,
        "steps": steps,
    }
    (out_dir / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    if steps and all(steps.values()):
        plot(result, out_dir / f"{args.name}.png")
        print(json.dumps(result["summary"], indent=2))
        print(
            "\n| mode | update s/step | vs off | update CPU s | vs off | samples/episode | tokens/step "
            "| calls/episode | mean reward |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for m, s in result["summary"].items():
            print(
                f"| {m} | {s['train_time_s_mean']:.2f} | {s.get('update_speedup_vs_off') or 0:.2f}x | "
                f"{s.get('server_cpu_train_s_mean') or 0:.1f} | {s.get('update_cpu_speedup_vs_off') or 0:.2f}x | "
                f"{s['samples_per_episode']:.2f} | {s['tokens_per_step']:.0f} | {s['calls_per_episode']:.2f} | "
                f"{s['mean_reward']:.3f} |"
            )
    return 0 if error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
