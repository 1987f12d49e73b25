"""The client process of `vibe train` (it runs in the tmux session's `client` window).

It starts the swarm server as its own subprocess (engine.jobs.ServerProcess: loopback, fresh admin token,
exits with this process, log in RUN/server.log, which the `server` window follows), configures it from
vibe.yaml, and plays B tasks x N episodes per step until `--steps` training steps are done. After every
step it appends the rewards to RUN/rewards.jsonl and rewrites RUN/status.json; training whose every
group had equal rewards `flat_steps` steps running is flagged there and on screen at once.
"""

from __future__ import annotations

import argparse
import json
import os
import traceback
from pathlib import Path

from engine.client import run_episodes
from engine.jobs import ServerProcess
from vibe.config import VibeJob
from vibe.dataset import read_jsonl
from vibe.episode import play
from vibe.layout import CLIENT_FILE, CONFIG_FILE, TRAIN_FILE
from vibe.loader import contract_function, load_module
from vibe.private import write_private
from vibe.progress import FLAT_FLAG, flat_streak, read_rewards
from vibe.stats import component_stats, group_spreads, mean_std


def _write_status(run_dir: Path, **status) -> None:
    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status))
    os.replace(tmp, run_dir / "status.json")


def train(root: Path, run_dir: Path, steps: int) -> None:
    job = VibeJob.load(root / CONFIG_FILE)
    run = contract_function(load_module(root, CLIENT_FILE), CLIENT_FILE)
    tasks = read_jsonl(root / TRAIN_FILE)[0]
    B, N = job.swarm.pool.batch_size, job.swarm.pool.group_size
    cfg = job.swarm.model_copy(update={
        "run_dir": str(run_dir), "training": job.swarm.training.model_copy(update={"max_steps": steps})})
    flags: list[dict] = []
    server = ServerProcess(run_dir, log_path=run_dir / "server.log")
    write_private(run_dir / "admin_token", server.token)  # for `swarm top` while it runs
    (run_dir / "server_url").write_text(server.url + "\n")
    try:
        with server.client("vibe-train") as client:
            client.configure(cfg)
            step = client.start(wait=True)["global_step"]
            print(f"[vibe] server ROLLING at step {step}: {cfg.model.name}, {B} tasks x {N} episodes per step", flush=True)
            _write_status(run_dir, state="running", step=step, steps=steps, flags=flags)
            while step < steps:
                batch = [tasks[(step * B + k) % len(tasks)] for k in range(B)]
                # a task is (step, position): a task drawn twice is two groups of N, never one of 2N
                items = [(f"s{step}:{k}:{t['id']}", t) for k, t in enumerate(batch) for _ in range(N)]
                results: list[dict | None] = [None] * len(items)

                def one(ep, idx, items=items, results=results):
                    reward, results[idx] = play(run, ep, items[idx][1], job.sampling)
                    return reward

                res = run_episodes(client, list(range(len(items))), one, task_id=lambda idx, items=items: items[idx][0],
                                   concurrency=job.concurrency, show_progress=True)
                episodes = [{"task_id": tid, "components": c} for (tid, _), c in zip(items, results, strict=True) if c]
                step = client.wait_for_step(step + 1, timeout=3600)["global_step"]
                totals = [r for r in res.rewards if r is not None]
                spreads = group_spreads(episodes)
                mean, std = mean_std(totals)
                record = {"step": step, "reward_mean": mean, "reward_std": std, "episodes": len(totals),
                          "failed": len(res.failures), "groups": len(spreads),
                          "flat_groups": sum(1 for s in spreads.values() if s == 0.0),
                          "components": component_stats(episodes)}
                with open(run_dir / "rewards.jsonl", "a") as f:
                    f.write(json.dumps(record) + "\n")
                print(f"[vibe] step {step}/{steps} reward {mean:.3f} +- {std:.3f} ({record['flat_groups']}/"
                      f"{record['groups']} groups without variance)", flush=True)
                streak = flat_streak(read_rewards(run_dir))
                if streak >= job.flat_steps and not any(f["code"] == FLAT_FLAG for f in flags):
                    flags.append({"code": FLAT_FLAG, "step": step, "message":
                                  f"every group had equal rewards for {streak} steps running: there is no learning "
                                  "signal (task too hard or too easy for the model, or a reward that ignores the answer)"})
                    print(f"[vibe] WARNING {flags[-1]['message']}", flush=True)
                _write_status(run_dir, state="running", step=step, steps=steps, flags=flags)
            _write_status(run_dir, state="done", step=step, steps=steps, flags=flags)
    except Exception as e:
        _write_status(run_dir, state="failed", step=None, steps=steps, flags=flags, error=f"{type(e).__name__}: {e}")
        traceback.print_exc()
        raise SystemExit(1) from None
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--steps", type=int, required=True)
    args = p.parse_args()
    train(Path(args.root), Path(args.run_dir), args.steps)


if __name__ == "__main__":
    main()
