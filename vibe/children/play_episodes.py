"""Sandboxed child of `vibe check`: play N tasks x K times with the client against a debug server and
write every episode's reward components (or the error) to --result. Run by vibe.sandbox only."""

from __future__ import annotations

import argparse
import json
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from engine.client import SwarmClient
from vibe.config import VibeJob
from vibe.jsonl import read_jsonl
from vibe.layout import CLIENT_FILE, CONFIG_FILE, TRAIN_FILE
from vibe.loader import client_roles, contract_function, load_module
from vibe.netbridge import TcpToUnix
from vibe.play import play_task


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--url-1", required=True)
    p.add_argument("--token-file-1", required=True)
    p.add_argument("--url-2", help="the second server (second_server_roles), when there is one")
    p.add_argument("--token-file-2")
    p.add_argument("--bridge-1", help="unix socket that carries server 1's port into this network namespace")
    p.add_argument("--bridge-2")
    p.add_argument("--result", required=True)
    args = p.parse_args()
    root = Path(args.root)
    for url, sock in ((args.url_1, args.bridge_1), (args.url_2, args.bridge_2)):
        if url and sock:  # the server's URL works unchanged: its port here leads to the socket
            TcpToUnix(urlsplit(url).port, Path(sock))
    job = VibeJob.load(root / CONFIG_FILE)
    module = load_module(root, CLIENT_FILE)
    run, roles = contract_function(module, CLIENT_FILE), client_roles(module)
    tasks = read_jsonl(root / TRAIN_FILE)[0][: job.check.tasks]
    def connect(url: str, token_file: str) -> SwarmClient:
        return SwarmClient(url, admin_token=Path(token_file).read_text().strip(), client_id="vibe-check")

    def one(task: dict, client: SwarmClient, second: dict[str, SwarmClient]) -> list[dict]:
        # K plays of a task share its id, so they form one group (per role) on the server
        try:
            return play_task(client, run, roles, task["id"], task, job.sampling, second)
        except Exception as e:  # noqa: BLE001 - any failure of client code is the finding
            return [{"task_id": task["id"], "error": f"{type(e).__name__}: {e}",
                     "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])}]

    with connect(args.url_1, args.token_file_1) as client, ThreadPoolExecutor(job.concurrency) as pool:
        client_2 = connect(args.url_2, args.token_file_2) if args.url_2 else None
        second = {r: client_2 for r in job.second_server_roles} if client_2 else {}
        plays = [t for t in tasks for _ in range(job.check.episodes)]
        episodes = [r for records in pool.map(lambda t: one(t, client, second), plays) for r in records]
        if client_2 is not None:
            client_2.close()
    Path(args.result).write_text(json.dumps({"episodes": episodes, "roles": roles}))


if __name__ == "__main__":
    main()
