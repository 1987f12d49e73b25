"""Sandboxed child: play tasks with the client against swarm server(s) and write every play's records
(reward components, or the error) to --result. Run by vibe.sandbox only.

`vibe check`'s dry run plays its first N tasks x K times; `vibe train` hands each step's plays in a
--plays file. A play is (task id, its number among the plays of that task, task): the number is its
episode index on the server, which seeds its calls' sampling streams. A play that raises is played again up to --retries times; one that runs past
--episode-timeout is given up and named (its thread cannot be stopped, so the process ends with
os._exit once the others are done; the server expires its episode)."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.client import SwarmClient
from vibe.config import VibeJob
from vibe.jsonl import read_jsonl
from vibe.layout import CLIENT_FILE, CONFIG_FILE, TRAIN_FILE
from vibe.loader import client_roles, contract_function, load_module
from vibe.netbridge import TcpToUnix
from vibe.play import play_task


def _error(task_id: str, e: BaseException) -> dict[str, Any]:
    return {"task_id": task_id, "error": f"{type(e).__name__}: {e}",
            "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--url-1", required=True)
    p.add_argument("--token-file-1", required=True)
    p.add_argument("--url-2", help="the second server (second_server_roles), when there is one")
    p.add_argument("--token-file-2")
    p.add_argument("--bridge-1", help="unix socket that carries server 1's port into this network namespace")
    p.add_argument("--bridge-2")
    p.add_argument("--plays", help="JSON file: [[task_id, index, task], ...] (default: the check's N tasks x K)")
    p.add_argument("--episode-timeout", type=float, default=None, help="seconds one play may take")
    p.add_argument("--retries", type=int, default=0, help="plays again of a play that raised")
    p.add_argument("--result", required=True)
    args = p.parse_args()
    root = Path(args.root)
    for url, sock in ((args.url_1, args.bridge_1), (args.url_2, args.bridge_2)):
        if url and sock:  # the server's URL works unchanged: its port here leads to the socket
            TcpToUnix(urlsplit(url).port, Path(sock))
    job = VibeJob.load(root / CONFIG_FILE)
    module = load_module(root, CLIENT_FILE)
    run, roles = contract_function(module, CLIENT_FILE), client_roles(module)
    if args.plays:
        plays = [(str(i), int(r), t) for i, r, t in json.loads(Path(args.plays).read_text())]
    else:  # K plays of a task share its id, so they form one group (per role) on the server
        tasks = read_jsonl(root / TRAIN_FILE)[0][: job.check.tasks]
        plays = [(t["id"], r, t) for t in tasks for r in range(job.check.episodes)]

    def connect(url: str, token_file: str) -> SwarmClient:
        return SwarmClient(url, admin_token=Path(token_file).read_text().strip(), client_id="vibe-client")

    started: dict[int, float] = {}
    lock = threading.Lock()

    def one(k: int, task_id: str, index: int, task: dict, client: SwarmClient,
            second: dict[str, SwarmClient]) -> list[dict]:
        with lock:
            started[k] = time.monotonic()
        for attempt in range(args.retries + 1):
            try:
                return play_task(client, run, roles, task_id, task, job.sampling, second, index=index)
            except Exception as e:  # noqa: BLE001 - any failure of client code is the finding
                if attempt == args.retries:
                    return [_error(task_id, e) | {"attempts": attempt + 1}]
        raise AssertionError("not reached")

    client = connect(args.url_1, args.token_file_1)
    client_2 = connect(args.url_2, args.token_file_2) if args.url_2 else None
    second = {r: client_2 for r in job.second_server_roles} if client_2 else {}
    pool = ThreadPoolExecutor(job.concurrency)
    futures: list[Future] = [pool.submit(one, k, tid, r, t, client, second) for k, (tid, r, t) in enumerate(plays)]
    records: dict[int, list[dict]] = {}
    hung = False
    while len(records) < len(futures):
        for k, f in enumerate(futures):
            if k in records:
                continue
            if f.done():
                records[k] = f.result()
            elif args.episode_timeout and k in started and time.monotonic() - started[k] > args.episode_timeout:
                hung = True
                records[k] = [{"task_id": plays[k][0], "timed_out": True,
                               "error": f"TimeoutError: the play did not end within {args.episode_timeout:g} s "
                                        "(episode_timeout_s in vibe.yaml)"}]
        time.sleep(0.05)
    episodes = [r for k in range(len(futures)) for r in records[k]]
    Path(args.result).write_text(json.dumps({"episodes": episodes, "roles": roles}))
    if hung:  # a hung play's thread cannot be stopped; the result is written, so end here
        os._exit(0)
    pool.shutdown()
    client.close()
    if client_2 is not None:
        client_2.close()


if __name__ == "__main__":
    main()
