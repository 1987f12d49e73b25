"""Our engine vs TRL's GRPOTrainer vs a bare torch loop, side by side in one process, interleaved step by
step, on CPU.

Both sides train the same model (`smollm2-135m`, the plain HF directory our model cache holds) on the same
arithmetic prompts (engine.tasks.arithmetic, same seed, same order, chat format) with the same group size G,
prompts per step B, reply budget, sampling temperature, learning rate, optimizer (AdamW with torch's fused
kernel on all three sides, constant lr, grad clip 1.0), loss family and reward function (`Arithmetic.reward`), for the same number of steps.

- ours: `engine.jobs.train_single(TrainJob)`, unmodified: it starts a real `swarm serve` subprocess on loopback
  and runs the arithmetic client (B*G concurrent episodes over HTTP per step). Algorithm: `grpo` advantages
  + `ppo_clip`, token_mean, kl_coef=0, 1 PPO epoch, mini-batch B*G, micro-batch --micro. Checkpoints off
  (TRL saves none either).
- TRL: `GRPOTrainer(use_cpu=True, use_vllm=False, beta=0, loss_type=--trl-loss, scale_rewards="group",
  num_iterations=1, per_device_train_batch_size=--micro, gradient_accumulation_steps=B*G/--micro)`, so one
  optimizer step = one generation of B prompts x G completions followed by B*G/micro forward/backward passes,
  exactly like ours.

- bare: a hand-written loop in this process (`run_bare`): HF `generate` with its KV cache, rewards, GRPO
  advantages, B*G/--micro forward/backward passes over the padded sequences (logits for the completion
  only), the same clipped token-mean loss over the whole batch, grad clip, AdamW. No server, HTTP or
  tracking: the floor both frameworks are measured against, phase by phase.

Interleaving: the machine is shared, so load changes over minutes. All three are alive at once and a
baton passes in a cycle step by step (ours step 1, TRL step 1, bare step 1, ours step 2, ...); only the
holder computes, the others wait on a lock. Our side is timed around `run_episodes` + `wait_for_step` inside `train()`
(module attributes wrapped for timing and the baton only); TRL's from `on_step_begin` to `on_step_end`
(its generation happens inside the step). Step 1 of each side is reported separately (warm-up).

Breakdown: ours = client-side episode time (generation over HTTP) + the server's `train_time_s`
(metrics.jsonl, split into forward, backward and optimizer) + the rest (pool drain, state changes, 0.2 s
status polling); TRL = `_generate_and_score_completions` (generation + reward) + the rest
(forward/backward/optimizer); bare = generation, forward, backward, optimizer, each timed.

CPU seconds per step (psutil, all threads): ours = the server process + this process (HTTP client) during
our step; TRL = this process during its step (our side is parked meanwhile). On a machine shared with other
jobs wall time mostly measures how much CPU each side was granted; CPU time is far less sensitive to that.

    python benchmarks/trl_compare.py                       # 4 prompts x G=4, 32 tokens, 8 steps each
    python benchmarks/trl_compare.py --steps 2 --max-tokens 8 --out-dir runs/trl_small   # smoke test
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

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# One OpenMP environment for both sides. Importing `engine` sets OMP_WAIT_POLICY=PASSIVE unless it is
# already set (engine/__init__.py); libgomp reads it once, when torch loads it. So engine goes first: then
# TRL (in this process) and our server (a subprocess inheriting os.environ) run under the same policy.
# Importing torch first would leave TRL on libgomp's spinning default while our server got PASSIVE.
# To compare under another policy: OMP_WAIT_POLICY=ACTIVE python benchmarks/trl_compare.py
import engine  # noqa: E402, F401, I001


import engine.jobs as jobs  # noqa: E402
from benchmarks.common import cpu_seconds, fmt_spread, loadavg, machine_record, spread  # noqa: E402
from engine.client import SwarmClient  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.models import resolve_model_dir  # noqa: E402
from engine.tasks.arithmetic import Arithmetic  # noqa: E402
from engine.tasks.base import Item  # noqa: E402


SIDES = ("ours", "trl", "bare")


class Baton:
    """Players take turns in a fixed cycle; a finished (or crashed) player leaves the cycle and never blocks
    the others."""

    def __init__(self, players: tuple[str, ...]) -> None:
        self.players = players
        self.turn = players[0]
        self.done: set[str] = set()
        self.cond = threading.Condition()

    def acquire(self, me: str) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == me)

    def release(self, me: str) -> None:
        with self.cond:
            self.turn = self._next(me)
            self.cond.notify_all()

    def finish(self, me: str) -> None:
        with self.cond:
            self.done.add(me)
            if self.turn == me:
                self.turn = self._next(me)
            self.cond.notify_all()

    def _next(self, me: str) -> str:
        i = self.players.index(me)
        for k in range(1, len(self.players) + 1):
            p = self.players[(i + k) % len(self.players)]
            if p not in self.done:
                return p
        return me


def load1() -> float:
    return os.getloadavg()[0]


def server_process(run_dir: Path):
    """The `swarm serve` child that train() started for `run_dir` (psutil.Process or None)."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "serve" in cmd and str(run_dir) in cmd:
            return child
    return None


# -- ours --------------------------------------------------------------------------------------------
def run_ours(args, items: list[Item], run_dir: Path, baton: Baton | None, out: dict) -> None:
    """engine.jobs.train_single with timing hooks: per step, episode (generation) time and wait-for-step time."""
    import psutil

    steps: list[dict] = []
    out["steps"] = steps
    orig_run, orig_wait = jobs.run_episodes, SwarmClient.wait_for_step
    current: dict = {}
    me = psutil.Process()
    server: list = []

    def timed_run(client, episodes, fn, **kw):
        if baton:
            baton.acquire("ours")
        kw["show_progress"] = False
        if not server:
            server.append(server_process(run_dir))
        current.clear()
        current.update(
            t0=time.perf_counter(),
            load1=load1(),
            item_ids=sorted({it.id for _k, it in episodes}),
            cpu0_client=cpu_seconds(me),
            cpu0_server=cpu_seconds(server[0]) if server[0] else None,
        )
        res = orig_run(client, episodes, fn, **kw)
        current["gen_s"] = time.perf_counter() - current["t0"]
        current["client_mean_reward"] = res.mean_reward
        current["failures"] = len(res.failures)
        return res

    def timed_wait(self, step, *a, **kw):
        t = time.perf_counter()
        st = orig_wait(self, step, *a, **kw)
        now = time.perf_counter()
        rec = {**current, "step": step, "wait_s": now - t, "step_s": now - current["t0"]}
        # CPU seconds of the step: the server (inference + training) plus this process (the HTTP client).
        rec["cpu_client_s"] = cpu_seconds(me) - rec.pop("cpu0_client")
        c0 = rec.pop("cpu0_server")
        rec["cpu_server_s"] = cpu_seconds(server[0]) - c0 if c0 is not None else None
        rec["cpu_s"] = rec["cpu_client_s"] + (rec["cpu_server_s"] or 0.0)
        rec["server_rss_gb"] = server[0].memory_info().rss / 1e9 if server[0] else None
        del rec["t0"]
        steps.append(rec)
        if baton:
            baton.release("ours")
        return st

    cfg = SwarmConfig.model_validate(
        {
            "model": {"name": args.model, "seed": args.seed},
            "algorithm": {
                "advantage": "grpo",
                "policy_loss": "ppo_clip",
                "agg": "token_mean",
                "kl_coef": 0.0,
                "clip_low": 0.2,
                "clip_high": 0.2,
            },
            "pool": {"policy": "task_count", "batch_size": args.prompts, "group_size": args.group},
            "training": {
                "lr": args.lr,
                "max_steps": args.steps,
                "checkpoint_every": 0,
                "ppo_epochs": 1,
                "mini_batch_size": args.prompts * args.group,
                "micro_batch_size": args.micro,
                "max_grad_norm": 1.0,
                "weight_decay": 0.0,
            },
        }
    )
    job = jobs.TrainJob(
        task="arithmetic",
        swarm=cfg,
        seed=args.seed,
        eval_size=0,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        concurrency=args.prompts * args.group,
    )
    # train() builds its data as task.dataset(B * max_steps, seed): the same items TRL gets.
    assert [it.id for it in items] == [
        it.id for it in Arithmetic().dataset(args.prompts * args.steps, args.seed)
    ]
    jobs.run_episodes, SwarmClient.wait_for_step = timed_run, timed_wait
    try:
        t = time.perf_counter()
        jobs.train_single(job, run_dir)
        out["total_s"] = time.perf_counter() - t
        metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        for s, m in zip(steps, metrics, strict=False):
            s["reward"] = m["reward_mean"]
            s["train_time_s"] = m["train_time_s"]
            for phase in ("forward", "backward", "optimizer"):  # the update's split (engine metrics)
                s[f"train_{phase}_s"] = m.get(f"train_{phase}_s")
            s["server_tokens"] = m["tokens"]
            s["pg_loss"] = m.get("pg_loss")
            s["grad_norm"] = m.get("grad_norm")
        out["server_metrics"] = metrics
    except Exception:  # noqa: BLE001 - report, and let the other side finish
        out["error"] = traceback.format_exc()
        print(out["error"], file=sys.stderr)
    finally:
        jobs.run_episodes, SwarmClient.wait_for_step = orig_run, orig_wait
        if baton:
            baton.finish("ours")


# -- TRL ---------------------------------------------------------------------------------------------
def build_trl(args, items: list[Item], model_dir: Path, work: Path, baton: Baton | None, out: dict):
    import psutil
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    steps: list[dict] = []
    out["steps"] = steps
    seen: list[list[str]] = []
    me = psutil.Process()

    def reward(prompts, completions, answer, item_id, **kw):
        seen.append(sorted(set(item_id)))
        return [
            Arithmetic.reward(c[-1]["content"], Item(i, "", a))
            for c, a, i in zip(completions, answer, item_id, strict=True)
        ]

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if baton:
                baton.acquire("trl")
            self.gen0 = gen_time[0]
            self.load = load1()
            self.cpu0 = cpu_seconds(me)
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            dt = time.perf_counter() - self.t0
            # This process's CPU seconds; our side is parked on the baton meanwhile, so it is TRL's alone.
            steps.append(
                {
                    "step": state.global_step,
                    "step_s": dt,
                    "gen_s": gen_time[0] - self.gen0,
                    "cpu_s": cpu_seconds(me) - self.cpu0,
                    "rss_gb": me.memory_info().rss / 1e9,
                    "load1": self.load,
                    "item_ids": seen[-1] if seen else [],
                }
            )
            if baton:
                baton.release("trl")

    ds = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": it.prompt}], "answer": it.answer, "item_id": it.id}
            for it in items
        ]
    )
    micro = args.micro
    per_step = args.prompts * args.group
    cfg = GRPOConfig(
        output_dir=str(work / "trl"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        use_vllm=False,
        beta=0.0,
        loss_type=args.trl_loss,
        scale_rewards="group",
        num_iterations=1,
        epsilon=0.2,
        num_generations=args.group,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_step // micro,
        max_completion_length=args.max_tokens,
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch_fused",  # transformers' default with torch >= 2.8; ours and bare use it too
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=args.steps,
        shuffle_dataset=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        disable_dropout=True,
        seed=args.seed,
    )
    trainer = GRPOTrainer(
        model=str(model_dir), reward_funcs=reward, args=cfg, train_dataset=ds, callbacks=[Timer()]
    )
    gen_time = [0.0]
    orig_gen = trainer._generate_and_score_completions

    def timed_gen(*a, **kw):
        t = time.perf_counter()
        try:
            return orig_gen(*a, **kw)
        finally:
            gen_time[0] += time.perf_counter() - t

    trainer._generate_and_score_completions = timed_gen
    out["config"] = {
        "generation_batch_size": cfg.generation_batch_size,
        "steps_per_generation": cfg.steps_per_generation,
        "loss_type": cfg.loss_type,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "per_device_train_batch_size": cfg.per_device_train_batch_size,
    }
    return trainer


def run_trl(trainer, baton: Baton | None, out: dict) -> None:
    try:
        t = time.perf_counter()
        trainer.train()
        out["total_s"] = time.perf_counter() - t
        logs = [h for h in trainer.state.log_history if "reward" in h]
        for s, h in zip(out["steps"], logs, strict=False):
            s["reward"] = h["reward"]
            s["loss"] = h.get("loss")
            s["grad_norm"] = h.get("grad_norm")
            s["mean_completion_len"] = h.get("completions/mean_length")
            s["trl_step_time"] = h.get("step_time")
        out["log_history"] = trainer.state.log_history
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
        print(out["error"], file=sys.stderr)
    finally:
        if baton:
            baton.finish("trl")


# -- bare torch loop ---------------------------------------------------------------------------------
def run_bare(args, items: list[Item], model_dir: Path, baton: Baton | None, out: dict) -> None:
    """The same work as a hand-written loop in this process: HF `generate` (KV cache) for B prompts x G
    samples, rewards, GRPO advantages, then B*G/micro forward/backward passes of the padded sequences with
    the clipped token-mean loss over the whole batch, grad clip 1.0, AdamW. No server, no HTTP, no
    tracking: the floor a framework's step is measured against."""
    import psutil
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    steps: list[dict] = []
    out["steps"] = steps
    me = psutil.Process()
    try:
        torch.manual_seed(args.seed)
        tok = AutoTokenizer.from_pretrained(model_dir)
        tok.padding_side = "left"
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.eval()  # no dropout, as on the other two sides
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, fused=True)
        B, G, eps = args.prompts, args.group, 0.2
        for k in range(args.steps):
            if baton:
                baton.acquire("bare")
            load, cpu0, t0 = load1(), cpu_seconds(me), time.perf_counter()
            batch = items[k * B : (k + 1) * B]
            texts = [
                tok.apply_chat_template(
                    [{"role": "user", "content": it.prompt}], tokenize=False, add_generation_prompt=True
                )
                for it in batch
            ]
            enc = tok(texts, return_tensors="pt", padding=True)
            with torch.no_grad():
                seqs = model.generate(
                    **enc,
                    do_sample=True,
                    temperature=args.temperature,
                    top_p=1.0,
                    top_k=0,
                    max_new_tokens=args.max_tokens,
                    num_return_sequences=G,
                    pad_token_id=tok.pad_token_id,
                )
            P = enc.input_ids.shape[1]
            comp = seqs[:, P:]
            # a completion's tokens up to and including its first end-of-sequence
            ended = (comp == tok.eos_token_id).int().cumsum(1)
            cmask = ((ended == 0) | ((ended == 1) & (comp == tok.eos_token_id))).float()
            replies = tok.batch_decode(
                comp * cmask.long() + tok.pad_token_id * (1 - cmask.long()), skip_special_tokens=True
            )
            rewards = torch.tensor(
                [Arithmetic.reward(r, batch[i // G]) for i, r in enumerate(replies)], dtype=torch.float32
            ).view(B, G)
            adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).view(-1)
            attn = torch.cat([enc.attention_mask.repeat_interleave(G, 0), cmask.long()], dim=1)
            pos = (attn.cumsum(1) - 1).clamp(min=0)  # left padding: positions as generate used them
            gen_s = time.perf_counter() - t0
            n_tok = cmask.sum()
            fwd = bwd = 0.0
            for m in range(0, B * G, args.micro):
                sl = slice(m, m + args.micro)
                t = time.perf_counter()
                logits = model(
                    input_ids=seqs[sl],
                    attention_mask=attn[sl],
                    position_ids=pos[sl],
                    logits_to_keep=comp.shape[1] + 1,
                ).logits[:, :-1]
                logp = torch.log_softmax(logits.float(), -1).gather(-1, comp[sl, :, None])[..., 0]
                ratio = torch.exp(
                    logp - logp.detach()
                )  # one PPO epoch: old = current, as on both other sides
                a = adv[sl, None]
                per_tok = -torch.minimum(ratio * a, ratio.clamp(1 - eps, 1 + eps) * a)
                loss = (per_tok * cmask[sl]).sum() / n_tok
                t2 = time.perf_counter()
                loss.backward()
                fwd, bwd = fwd + t2 - t, bwd + time.perf_counter() - t2
            t = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            opt_s = time.perf_counter() - t
            steps.append(
                {
                    "step": k + 1,
                    "step_s": time.perf_counter() - t0,
                    "gen_s": gen_s,
                    "train_forward_s": fwd,
                    "train_backward_s": bwd,
                    "train_optimizer_s": opt_s,
                    "train_time_s": fwd + bwd + opt_s,
                    "cpu_s": cpu_seconds(me) - cpu0,
                    "load1": load,
                    "reward": float(rewards.mean()),
                    "completion_tokens": int(n_tok),
                    "item_ids": sorted(it.id for it in batch),
                }
            )
            if baton:
                baton.release("bare")
    except Exception:  # noqa: BLE001 - report, and let the other sides finish
        out["error"] = traceback.format_exc()
        print(out["error"], file=sys.stderr)
    finally:
        if baton:
            baton.finish("bare")


# -- report ------------------------------------------------------------------------------------------
def step_ratios(base: dict, other: dict, key: str) -> dict:
    """other/base per steady step k (step 1 is warm-up), paired by step: median and spread."""
    pairs = zip(base.get("steps", [])[1:], other.get("steps", [])[1:], strict=False)
    return spread([t[key] / o[key] for o, t in pairs if o.get(key) and t.get(key)])


def summarise(side: dict) -> dict:
    steps = side.get("steps", [])
    steady = steps[1:]

    def med(key):
        vals = [s[key] for s in steady if s.get(key) is not None]
        return statistics.median(vals) if vals else None

    def mean(key):
        vals = [s[key] for s in steady if s.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    return {
        "first_step_s": steps[0]["step_s"] if steps else None,
        "steady_steps": len(steady),
        "steady_mean_step_s": mean("step_s"),
        "steady_median_step_s": med("step_s"),
        "steady_mean_gen_s": mean("gen_s"),
        "steady_mean_train_time_s": mean("train_time_s"),
        "steady_mean_train_forward_s": mean("train_forward_s"),
        "steady_mean_train_backward_s": mean("train_backward_s"),
        "steady_mean_train_optimizer_s": mean("train_optimizer_s"),
        "steady_mean_load1": mean("load1"),
        "steady_mean_cpu_s": mean("cpu_s"),
        "steady_median_cpu_s": med("cpu_s"),
        "reward_curve": [s.get("reward") for s in steps],
        "mean_reward": statistics.fmean([s["reward"] for s in steps if s.get("reward") is not None])
        if any(s.get("reward") is not None for s in steps)
        else None,
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    names = [n for n in SIDES if n in result["summary"]]
    for name, color in zip(names, ("tab:blue", "tab:orange", "tab:gray"), strict=False):
        curve = result["summary"][name]["reward_curve"]
        ax1.plot(range(1, len(curve) + 1), curve, marker="o", color=color, label=name)
    ax1.set_xlabel("training step")
    ax1.set_ylabel("mean reward of the step's batch")
    ax1.set_title("reward per step (arithmetic, smollm2-135m)")
    ax1.legend()
    gen = [result["summary"][n]["steady_mean_gen_s"] or 0 for n in names]
    tot = [result["summary"][n]["steady_mean_step_s"] or 0 for n in names]
    cpu = [result["summary"][n].get("steady_mean_cpu_s") or 0 for n in names]
    rest = [t - g for t, g in zip(tot, gen, strict=True)]
    x = list(range(len(names)))
    w = 0.38
    ax2.bar([i - w / 2 for i in x], gen, w, color="tab:green", label="wall: generation (+reward)")
    ax2.bar([i - w / 2 for i in x], rest, w, bottom=gen, color="tab:red", label="wall: update + overhead")
    ax2.bar([i + w / 2 for i in x], cpu, w, color="tab:purple", label="CPU seconds (all threads)")
    for i in x:
        ax2.text(i - w / 2, tot[i], f"{tot[i]:.1f}", ha="center", va="bottom")
        ax2.text(i + w / 2, cpu[i], f"{cpu[i]:.1f}", ha="center", va="bottom")
    ax2.set_xticks(x, names)
    ratio, cratio = result["ratio_trl_over_ours"], result.get("cpu_ratio_trl_over_ours")
    title = f"per step, steady state; TRL/ours wall {ratio:.2f}x" if ratio else "per step"
    if cratio:
        title += f", CPU {cratio:.2f}x"
    ax2.set_title(title)
    ax2.set_ylabel("seconds / step")
    ax2.set_ylim(0, max(tot + cpu) * 1.35)
    ax2.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--prompts", type=int, default=4, help="B: prompts per step")
    p.add_argument("--group", type=int, default=4, help="G: completions per prompt")
    p.add_argument("--micro", type=int, default=4, help="sequences per forward/backward on both sides")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--trl-loss",
        default="dapo",
        help="TRL loss_type. dapo: token mean over the whole accumulated batch, which is what ours computes "
        "(token_mean over the mini-batch, accumulated exactly across micro-batches); bnpo: per micro-batch",
    )
    p.add_argument("--order", choices=["interleaved", "sequential"], default="interleaved")
    p.add_argument("--work-dir", default="runs/trl_compare")
    p.add_argument("--out-dir", default="docs/benchmarks")
    p.add_argument("--name", default="trl_compare")
    p.add_argument("--replot", metavar="JSON", help="only redraw the plot of a saved result (PNG next to it)")
    args = p.parse_args()
    if args.replot:
        path = Path(args.replot)
        plot(json.loads(path.read_text()), path.with_suffix(".png"))
        return 0
    if (args.prompts * args.group) % args.micro:
        p.error("--micro must divide prompts * group")

    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    model_dir = resolve_model_dir(args.model)
    items = Arithmetic().dataset(args.prompts * args.steps, seed=args.seed)
    baton = Baton(SIDES) if args.order == "interleaved" else None
    ours: dict = {}
    trl: dict = {}
    bare: dict = {}
    t_start = time.time()
    load_before = loadavg()
    trainer = build_trl(args, items, model_dir, work, baton, trl)
    if baton:
        threads = [
            threading.Thread(target=run_ours, args=(args, items, work / "ours", baton, ours), daemon=True),
            threading.Thread(target=run_bare, args=(args, items, model_dir, baton, bare), daemon=True),
        ]
        for th in threads:
            th.start()
        run_trl(trainer, baton, trl)
        for th in threads:
            th.join()
    else:
        run_ours(args, items, work / "ours", None, ours)
        run_trl(trainer, None, trl)
        run_bare(args, items, model_dir, None, bare)

    item_ids = [[s.get("item_ids") for s in side.get("steps", [])] for side in (ours, trl, bare)]
    same_prompts = item_ids[0] == item_ids[1] == item_ids[2]
    summary = {"ours": summarise(ours), "trl": summarise(trl), "bare": summarise(bare)}
    o, t = summary["ours"]["steady_mean_step_s"], summary["trl"]["steady_mean_step_s"]
    result = {
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "machine": machine_record(load_before),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset (libgomp default)"),
        "trl_version": __import__("trl").__version__,
        "transformers_version": __import__("transformers").__version__,
        "args": vars(args),
        "same_prompts_per_step": same_prompts,
        "wall_s": time.time() - t_start,
        "ratio_trl_over_ours": (t / o) if o and t else None,
        # each steady step is one interleaved repeat (ours step k, then TRL step k): the ratio's spread
        "step_ratio_trl_over_ours": step_ratios(ours, trl, "step_s"),
        "step_cpu_ratio_trl_over_ours": step_ratios(ours, trl, "cpu_s"),
        # the hand-written loop as the floor: how far each framework's step is above it
        "step_ratio_ours_over_bare": step_ratios(bare, ours, "step_s"),
        "step_ratio_trl_over_bare": step_ratios(bare, trl, "step_s"),
        "cpu_ratio_trl_over_ours": (
            summary["trl"]["steady_mean_cpu_s"] / summary["ours"]["steady_mean_cpu_s"]
        )
        if summary["ours"].get("steady_mean_cpu_s") and summary["trl"].get("steady_mean_cpu_s")
        else None,
        "summary": summary,
        "ours": ours,
        "trl": trl,
        "bare": bare,
    }
    (out_dir / f"{args.name}.json").write_text(json.dumps(result, indent=2, default=str))
    if o and t:
        plot(result, out_dir / f"{args.name}.png")
    print(
        json.dumps(
            {
                "ratio_trl_over_ours": result["ratio_trl_over_ours"],
                "step_ratio_trl_over_ours": fmt_spread(result["step_ratio_trl_over_ours"]),
                "step_cpu_ratio_trl_over_ours": fmt_spread(result["step_cpu_ratio_trl_over_ours"]),
                "step_ratio_ours_over_bare": fmt_spread(result["step_ratio_ours_over_bare"]),
                "step_ratio_trl_over_bare": fmt_spread(result["step_ratio_trl_over_bare"]),
                "cpu_ratio_trl_over_ours": result["cpu_ratio_trl_over_ours"],
                "same_prompts": same_prompts,
                "summary": summary,
            },
            indent=2,
        )
    )
    print(
        "\n| side | first step s | steady s/step (mean) | median | generation s | update s | CPU s/step | mean load1 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in SIDES:
        s = summary[name]
        if s["first_step_s"] is None:
            continue
        upd = (
            s["steady_mean_train_time_s"]
            if name != "trl"
            else ((s["steady_mean_step_s"] or 0) - (s["steady_mean_gen_s"] or 0))
        )
        print(
            f"| {name} | {s['first_step_s']:.1f} | {s['steady_mean_step_s']:.1f} | {s['steady_median_step_s']:.1f} | "
            f"{s['steady_mean_gen_s']:.1f} | {upd:.1f} | {s['steady_mean_cpu_s'] or float('nan'):.1f} | "
            f"{s['steady_mean_load1']:.1f} |"
        )
    return 0 if all("error" not in side for side in (ours, trl, bare)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
