"""Sandboxed child of `vibe check`: play N tasks x K episodes of the client against a debug server and
write every episode's reward components (or error) to --result. Run by vibe.sandbox only."""

from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path

from engine.client import SwarmClient, run_episodes
from vibe.config import VibeJob
from vibe.dataset import read_jsonl
from vibe.episode import play as play_episode
from vibe.layout import CLIENT_FILE, CONFIG_FILE, TRAIN_FILE
from vibe.loader import contract_function, load_module


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--result", required=True)
    args = p.parse_args()
    root = Path(args.root)
    job = VibeJob.load(root / CONFIG_FILE)
    run = contract_function(load_module(root, CLIENT_FILE), CLIENT_FILE)
    tasks = read_jsonl(root / TRAIN_FILE)[0][: job.check.tasks]
    # (episode index, task): K repeats of a task share its id, so they form one group on the server
    items = list(enumerate(t for t in tasks for _ in range(job.check.episodes)))
    episodes: list[dict] = [{"task_id": t["id"]} for _, t in items]

    def one(ep, pair):
        idx = pair[0]
        try:
            reward, episodes[idx]["components"] = play_episode(run, ep, pair[1], job.sampling)
        except Exception as e:
            episodes[idx]["error"] = f"{type(e).__name__}: {e}"
            episodes[idx]["traceback"] = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
            raise
        return reward

    token = Path(args.token_file).read_text().strip()
    with SwarmClient(args.url, admin_token=token, client_id="vibe-check") as client:
        res = run_episodes(client, items, one, task_id=lambda pair: pair[1]["id"], concurrency=job.concurrency,
                           retries=0, show_progress=False)
    Path(args.result).write_text(json.dumps({"episodes": episodes, "accepted": res.accepted}))


if __name__ == "__main__":
    main()
