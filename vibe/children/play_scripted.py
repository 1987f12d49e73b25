"""Sandboxed child of `vibe check`'s whole-loop probes: call the client's own `run()` once per play against
the scripted model (vibe.scripted_model), each play with its own API key, and write each play's reward
(or the error it raised) to --result. Run by vibe.sandbox only.

The scripted model's port is carried into the sandbox's empty network namespace over --bridge, as the
dry run carries the swarm server's."""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai

from vibe.layout import CLIENT_FILE
from vibe.loader import client_roles, contract_function, load_module
from vibe.netbridge import TcpToUnix
from vibe.reward_probes import total

MODEL = "scripted"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--url", required=True, help="the scripted model's base URL (…/v1)")
    p.add_argument("--bridge", required=True, help="unix socket that carries its port into this namespace")
    p.add_argument("--plays", required=True, help="JSON file: [[api_key, task], ...]")
    p.add_argument("--sampling", required=True, help="vibe.yaml's sampling (temperature, max_tokens) as JSON")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--call-timeout", type=float, default=30.0)
    p.add_argument("--play-timeout", type=float, default=60.0, help="seconds one play may take, then it is named")
    p.add_argument("--result", required=True)
    args = p.parse_args()
    root = Path(args.root)
    TcpToUnix(urlsplit(args.url).port, Path(args.bridge))
    sampling = json.loads(args.sampling)
    module = load_module(root, CLIENT_FILE)
    run, roles = contract_function(module, CLIENT_FILE), client_roles(module)
    plays = json.loads(Path(args.plays).read_text())

    started: dict[str, float] = {}
    lock = threading.Lock()

    def one(key: str, task: dict[str, Any]) -> dict[str, Any]:
        with lock:
            started[key] = time.monotonic()
        llm = openai.OpenAI(base_url=args.url, api_key=key, max_retries=0, timeout=args.call_timeout)
        try:
            out = run({r: llm for r in roles} if roles else llm, MODEL, task, dict(sampling))
            if roles:
                if not isinstance(out, dict) or set(out) != set(roles):
                    raise TypeError(f"run() of a client with ROLES must return {{role: {{component: value}}}} for roles {roles}")
                rewards = {r: total(out[r]) for r in roles}
            else:
                rewards = {"": total(out)}
            return {"key": key, "rewards": rewards}
        except Exception as e:  # noqa: BLE001 - any failure of client code is the finding
            return {"key": key, "error": f"{type(e).__name__}: {e}",
                    "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])}
        finally:
            llm.close()

    pool = ThreadPoolExecutor(args.concurrency)
    futures = {key: pool.submit(one, key, task) for key, task in plays}
    records: dict[str, dict[str, Any]] = {}
    while len(records) < len(futures):
        for key, f in futures.items():
            if key in records:
                continue
            if f.done():
                records[key] = f.result()
            elif key in started and time.monotonic() - started[key] > args.play_timeout:
                records[key] = {"key": key, "timed_out": True,
                                "error": f"TimeoutError: the play did not end within {args.play_timeout:g} s"}
        time.sleep(0.02)
    Path(args.result).write_text(json.dumps({"plays": [records[key] for key, _ in plays]}))
    if any(r.get("timed_out") for r in records.values()):  # a hung play's thread cannot be stopped
        os._exit(0)
    pool.shutdown()


if __name__ == "__main__":
    main()
