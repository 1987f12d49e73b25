"""Bounded load test of the swarm server on loopback (issue 26, Deliver 3): many concurrent episodes,
streaming and not, a seeded share of clients hanging up mid-stream or mid-request, while a separate
process probes `/health` every 100 ms and samples the server's memory.

A real `swarm serve` subprocess (model `tiny`, its pool journal in a run dir) serves E episodes at once,
each a short conversation of `--calls` calls through its OpenAI-compatible endpoint (the `openai` SDK, as
an agent would use it), then an end with a reward (or, for a seeded share, an abort), as real clients do.
The pool's trigger is set out of reach, so no training step runs: this measures serving, not training.
In a seeded share of episodes one call hangs up: a streamed one after its first 1-8 content chunks, a
non-streamed one 0.05-0.5 s after sending; such a call asks for 1024 tokens, so it is still generating
when its client goes. After the load (checked by `check_load`, a pure function of what was recorded):

- no HTTP 5xx anywhere (episode begin, calls, end, `/health`), every `/health` probe answered, and every
  call that did not hang up answered 200;
- every accepted episode is in the pool journal exactly once (read as `swarm audit` reads it), and
  nothing else is: no aborted or refused episode;
- no trainable text the client did not receive (issue 26, defect 2): each pooled episode's trainable
  (model-written) blocks are exactly the replies its client received whole; a call cut off is not there;
- peak RSS of the server within its idle RSS (after boot and one warm-up call) plus `--rss-headroom-mib`;
- the target (a timing figure, reported apart from the checks above): worst `/health` latency during the
  load under `--health-limit-s` (1 s).

    python benchmarks/server_load.py --episodes 64 --calls 4 --seed 0 --out docs/benchmarks/server_load.json --md docs/benchmarks/server_load.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import loadavg, machine_record  # noqa: E402
from engine.training.audit import audit_run_dir, read_json_lines  # noqa: E402

SHORT_TOKENS = 16  # a call that runs to its end
LONG_TOKENS = 1024  # a call whose client hangs up: long enough to be still generating when it does
GROUP_SIZE = 4
HEALTH_INTERVAL_S = 0.1
SPECIAL = re.compile(r"<\|[^|]*\|>|</?s>")  # end-of-turn markers a block may carry after the reply text


# ------------------------------------------------------------------------------------------------ plan


def plan_episodes(seed: int, episodes: int, calls: int, stream_share: float, hangup_share: float,
                  abort_share: float) -> list[dict[str, Any]]:
    """What each client will do, from the seed alone: per call streamed or not, which call (if any) hangs
    up and when, and whether the episode ends with a reward or is aborted."""
    rng = random.Random(seed)
    plans = []
    for i in range(episodes):
        cut_at = rng.randrange(calls) if rng.random() < hangup_share else None
        plan_calls = []
        for j in range(calls):
            stream = rng.random() < stream_share
            hangup = None
            if j == cut_at:
                hangup = {"after_chunks": rng.randint(1, 8)} if stream else {"after_s": round(rng.uniform(0.05, 0.5), 3)}
            plan_calls.append({"stream": stream, "hangup": hangup})
        plans.append({
            "episode": i,
            "task_id": f"load-{i // GROUP_SIZE}",
            "index": i % GROUP_SIZE,
            "calls": plan_calls,
            "finish": "abort" if rng.random() < abort_share else "end",
            "reward": float(rng.random() < 0.5),
        })
    return plans


# -------------------------------------------------------------------------------------------- clients


async def _one_call(llm: Any, model: str, messages: list[dict], call: dict[str, Any]) -> dict[str, Any]:
    """One chat call as the plan says; what the client got: status, text, whether it was received whole."""
    import openai

    hangup = call["hangup"]
    out: dict[str, Any] = {"stream": call["stream"], "hangup": hangup is not None, "cut": False,
                           "status": None, "text": "", "error": None}
    kw = {"model": model, "messages": messages, "max_tokens": LONG_TOKENS if hangup else SHORT_TOKENS}
    try:
        if call["stream"]:
            stream = await llm.chat.completions.create(stream=True, **kw)
            out["status"] = 200
            chunks, finished = 0, False
            async for chunk in stream:
                for choice in chunk.choices:
                    out["text"] += choice.delta.content or ""
                    finished = finished or choice.finish_reason is not None
                chunks += any(c.delta.content for c in chunk.choices)
                if hangup and chunks >= hangup["after_chunks"] and not finished:
                    await stream.close()  # the connection goes: the server must stop and record nothing
                    out["cut"] = True
                    break
        else:
            request = llm.chat.completions.create(**kw)
            try:
                reply = await (asyncio.wait_for(request, hangup["after_s"]) if hangup else request)
            except TimeoutError:  # the request is cancelled and its connection closed, no answer read
                out["cut"] = True
            else:
                out["status"] = 200
                out["text"] = reply.choices[0].message.content or ""
    except openai.APIStatusError as e:
        out["status"], out["error"] = e.status_code, str(e)[:300]
    except (openai.APIError, OSError) as e:  # a connection lost, an error event in a stream
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return out


async def run_episode(http: Any, url: str, token: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Begin, run the planned calls (a reply received whole joins the conversation; a cut-off call is
    simply retried by the next one), then end with the reward or abort. What happened, for `check_load`."""
    import openai

    rec: dict[str, Any] = {"episode": plan["episode"], "episode_id": None, "statuses": [], "calls": [],
                           "finish": plan["finish"], "accepted": None, "error": None}
    begin = await http.post(f"{url}/swarm/episodes", headers={"Authorization": f"Bearer {token}"},
                            json={"task_id": plan["task_id"], "client_id": "load", "index": plan["index"]})
    rec["statuses"].append(begin.status_code)
    if begin.status_code != 200:
        rec["error"] = f"begin answered {begin.status_code}: {begin.text[:200]}"
        return rec
    d = begin.json()
    rec["episode_id"] = d["episode_id"]
    key = {"Authorization": f"Bearer {d['api_key']}"}
    llm = openai.AsyncOpenAI(base_url=d["base_url"], api_key=d["api_key"], http_client=http, max_retries=0)
    messages = [{"role": "user", "content": f"Client {plan['episode']}: count from {plan['episode']} upwards."}]
    for call in plan["calls"]:
        got = await _one_call(llm, d["model"], messages, call)
        rec["calls"].append(got)
        if got["status"] is not None:
            rec["statuses"].append(got["status"])
        if got["status"] == 200 and not got["cut"] and not got["error"]:
            messages += [{"role": "assistant", "content": got["text"]}, {"role": "user", "content": "Go on."}]
    path = "/v1/episode/end" if plan["finish"] == "end" else "/v1/episode/abort"
    end = await http.post(url + path, headers=key, json={"reward": plan["reward"]} if plan["finish"] == "end" else {})
    rec["statuses"].append(end.status_code)
    if end.status_code == 200:
        rec["accepted"] = bool(end.json().get("accepted"))
    else:
        rec["error"] = f"{path} answered {end.status_code}: {end.text[:200]}"
    return rec


async def drive(url: str, token: str, plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every planned episode at once, each its own client sharing one connection pool (no cap below E)."""
    import httpx

    limits = httpx.Limits(max_connections=4 * len(plans) + 8, max_keepalive_connections=2 * len(plans))
    # Generous: a loaded 2-core machine answers slowly, and a slow answer is a figure, not a failure.
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits) as http:
        return list(await asyncio.gather(*(run_episode(http, url, token, p) for p in plans)))


# ---------------------------------------------------------------------------------------------- probe


def probe(url: str, pid: int, out: Path, interval: float) -> None:
    """Until SIGTERM: GET /health every `interval` s (answered or not, with its latency) and the server's
    RSS, one JSON line each. Runs in its own process, so the load's clients never delay a probe."""
    import httpx
    import psutil

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    server = psutil.Process(pid)
    with open(out, "a") as f, httpx.Client(timeout=120.0) as http:  # generous: a slow answer is a figure
        while not stop:
            started = time.monotonic()
            # CLOCK_MONOTONIC is one clock for every process: `t` lines up with the load's start and end.
            sample: dict[str, Any] = {"t": round(started, 3), "status": None, "error": None}
            try:
                sample["status"] = http.get(url + "/health").status_code
            except httpx.HTTPError as e:
                sample["error"] = f"{type(e).__name__}: {e}"[:200]
            sample["latency_s"] = round(time.monotonic() - started, 4)
            try:
                sample["rss"] = server.memory_info().rss + sum(c.memory_info().rss for c in server.children(recursive=True))
            except psutil.Error:
                sample["rss"] = None
            f.write(json.dumps(sample) + "\n")
            f.flush()
            time.sleep(max(0.0, interval - (time.monotonic() - started)))


def _rss(pid: int) -> int:
    import psutil

    server = psutil.Process(pid)
    return server.memory_info().rss + sum(c.memory_info().rss for c in server.children(recursive=True))


# ---------------------------------------------------------------------------------------------- check


def _delivered(block_text: str, reply: str) -> bool:
    """A trainable block is a reply the client received if it is that text (plus at most end-of-turn markers)."""
    return block_text.startswith(reply) and not SPECIAL.sub("", block_text[len(reply):]).strip()


def check_load(episodes: list[dict[str, Any]], journal: list[dict[str, Any]], health: list[dict[str, Any]],
               rss: dict[str, int], *, rss_limit: int, health_limit_s: float) -> dict[str, Any]:
    """The checks of the module docstring over what the clients, the probe and the pool journal recorded.

    Returns `violations` (integrity: each must be empty), `target_misses` (the /health latency target, a
    timing figure) and the figures behind them."""
    violations: list[str] = []
    statuses = Counter(s for e in episodes for s in e["statuses"])
    statuses.update(h["status"] for h in health if h["status"] is not None)
    fives = {s: n for s, n in statuses.items() if s >= 500}
    if fives:
        violations.append(f"HTTP 5xx answered: {fives}")
    unanswered = [h for h in health if h["status"] is None]
    if unanswered:
        violations.append(f"{len(unanswered)} /health probe(s) unanswered, e.g. {unanswered[0]['error']}")
    failed = [(e["episode"], c["status"], c["error"]) for e in episodes for c in e["calls"]
              if not c["cut"] and (c["status"] != 200 or c["error"])]
    if failed:
        violations.append(f"{len(failed)} call(s) that did not hang up failed, e.g. {failed[:2]}")
    broken = [(e["episode"], e["error"]) for e in episodes if e["error"]]
    if broken:
        violations.append(f"{len(broken)} episode(s) could not begin or end, e.g. {broken[:2]}")

    pooled = Counter(r["episode"]["episode_id"] for r in journal if r.get("op") == "add")
    accepted = {e["episode_id"] for e in episodes if e["accepted"]}
    twice = sorted(k for k, n in pooled.items() if n > 1)
    if twice:
        violations.append(f"{len(twice)} episode(s) pooled more than once, e.g. {twice[:2]}")
    if accepted - set(pooled):
        violations.append(f"{len(accepted - set(pooled))} accepted episode(s) not in the pool journal")
    if set(pooled) - accepted:
        violations.append(f"{len(set(pooled) - accepted)} pooled episode(s) that were not accepted (aborted or refused)")

    by_id = {e["episode_id"]: e for e in episodes if e["episode_id"]}
    unseen, lost = [], []
    for r in journal:
        if r.get("op") != "add" or r["episode"]["episode_id"] not in by_id:
            continue
        ep = by_id[r["episode"]["episode_id"]]
        replies = [c["text"] for c in ep["calls"] if c["status"] == 200 and not c["cut"] and not c["error"]]
        blocks = [b["text"] for t in r["episode"]["timelines"] for b in t["blocks"] if b["trainable"]]
        for text in blocks:
            match = next((i for i, reply in enumerate(replies) if _delivered(text, reply)), None)
            if match is None:
                unseen.append((ep["episode"], text[:40]))
            else:
                replies.pop(match)
        lost += [(ep["episode"], reply[:40]) for reply in replies]
    if unseen:
        violations.append(f"{len(unseen)} trainable block(s) the client did not receive, e.g. {unseen[:2]}")
    if lost:
        violations.append(f"{len(lost)} reply(ies) received whole but missing from the pooled episode, e.g. {lost[:2]}")

    peak = max([rss.get("peak") or 0] + [h["rss"] for h in health if h.get("rss")])
    if peak > rss_limit:
        violations.append(f"peak RSS {peak / 2**20:.0f} MiB above the bound {rss_limit / 2**20:.0f} MiB")

    latencies = [h["latency_s"] for h in health if h["status"] is not None]
    worst = max(latencies, default=None)
    misses = [] if worst is None or worst <= health_limit_s else [
        f"worst /health latency {worst:.3f} s above the {health_limit_s:g} s target"]
    calls = [c for e in episodes for c in e["calls"]]
    figures = {
        "episodes": len(episodes),
        "accepted": len(accepted),
        "aborted": sum(1 for e in episodes if e["finish"] == "abort"),
        "pooled": sum(pooled.values()),
        "calls": len(calls),
        "streamed_calls": sum(1 for c in calls if c["stream"]),
        "hangups_planned": sum(1 for c in calls if c["hangup"]),
        "hangups_mid_stream": sum(1 for c in calls if c["cut"] and c["stream"]),
        "hangups_mid_request": sum(1 for c in calls if c["cut"] and not c["stream"]),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "health_probes": len(health),
        "health_worst_s": worst,
        "health_p50_s": statistics.median(latencies) if latencies else None,
        "health_over_limit": sum(1 for x in latencies if x > health_limit_s),
        "rss_idle_mib": round(rss["idle"] / 2**20, 1),
        "rss_peak_mib": round(peak / 2**20, 1),
        "rss_final_mib": round(rss["final"] / 2**20, 1),
        "rss_limit_mib": round(rss_limit / 2**20, 1),
    }
    return {"violations": violations, "target_misses": misses, "figures": figures}


# ------------------------------------------------------------------------------------------------ run


def server_config(run_dir: Path, episodes: int) -> dict[str, Any]:
    """The tiny model; the pool's trigger out of reach (no training step: this is a serving test)."""
    return {
        "model": {"name": "tiny"},
        "pool": {"batch_size": episodes + 1, "group_size": GROUP_SIZE},
        "episodes": {"max_context_tokens": 4096},
        "run_dir": str(run_dir),
    }


def _warm_up(client: Any) -> None:
    """One aborted episode with one call: lazy imports and first allocations happen before the idle RSS."""
    ep = client.begin_episode("warm-up")
    ep.openai(max_retries=0).chat.completions.create(
        model=ep.model, messages=[{"role": "user", "content": "hello"}], max_tokens=SHORT_TOKENS)
    ep.abort()


def run_load(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Start the server and the probe, drive the load, stop both; everything `check_load` needs."""
    from engine.jobs import ServerProcess

    run_dir = work / "run"
    # Booting is not what is measured: a loaded machine may take minutes to import torch and load the model.
    server = ServerProcess(run_dir=run_dir, log_path=work / "server.log", health_timeout_s=600.0)
    probe_out = work / "health.jsonl"
    prober = None
    try:
        client = server.client()
        client.configure(server_config(run_dir, args.episodes))
        client.start(wait=True)
        _warm_up(client)
        idle = _rss(server.proc.pid)
        prober = subprocess.Popen([sys.executable, __file__, "--probe", server.url, str(server.proc.pid), str(probe_out)])
        time.sleep(1.0)  # the probe's first samples are of the idle server
        plans = plan_episodes(args.seed, args.episodes, args.calls, args.stream_share, args.hangup_share, args.abort_share)
        started = time.monotonic()
        episodes = asyncio.run(drive(server.url, server.token, plans))
        load_s = time.monotonic() - started
        load_window = (started, time.monotonic())
        time.sleep(2.0)  # cancelled generations wind down; the final RSS is of the server at rest
        final = _rss(server.proc.pid)
        pool = client.pool()
        client.close()
    finally:
        if prober is not None:
            prober.terminate()
            prober.wait(30)
        server.stop()  # a clean stop: the journal is flushed before it is read
    return {"episodes": episodes, "journal": read_json_lines(run_dir / "pool.journal.jsonl"),
            "health": read_json_lines(probe_out), "rss": {"idle": idle, "final": final}, "pool": pool,
            "load_s": load_s, "load_window": load_window, "audit": audit_run_dir(run_dir).as_dict()}


def markdown(result: dict[str, Any]) -> str:
    f, m = result["figures"], result["machine"]
    ok = "all hold" if not result["violations"] else f"{len(result['violations'])} VIOLATION(S)"
    worst = result["worst_health"][:3]
    slowest = (" The slowest probes: " + ", ".join(f"{h['latency_s']:.2f} s sent {h['t']:.1f} s into the load" for h in worst)
               + "." if worst else "")
    lines = ["# Server load test (issue 26)", ""]
    if result.get("development"):
        lines += [f"**Development run** on a machine shared with other work (load {m['loadavg_before']} before, "
                  f"{m['loadavg_after']} after): the `/health` latency is a timing figure and is to be replaced by "
                  "a quiet rerun of the same command.", ""]
    lines += [
        f"`{result['command']}` on commit {m['git_commit'][:7]}{' (dirty tree)' if m['git_dirty'] else ''}, "
        f"{m['cpu_count']} CPUs, load {m['loadavg_before']} before and {m['loadavg_after']} after.",
        "",
        f"A real `swarm serve` (model `tiny`) on loopback; {f['episodes']} episodes at once, {result['calls']} calls each "
        f"({f['calls']} calls, {f['streamed_calls']} streamed), through its OpenAI endpoint with the `openai` SDK; "
        f"{f['hangups_planned']} calls planned to hang up: {f['hangups_mid_stream']} cut mid-stream and "
        f"{f['hangups_mid_request']} mid-request (the others ended before their moment); {f['aborted']} episodes "
        f"aborted, the rest ended with a reward. The load took {result['load_s']:.1f} s. Seed {result['seed']}.",
        "",
        f"**Checks: {ok}.**",
        "",
        "| check | result |",
        "|---|---|",
        f"| HTTP statuses seen (clients and probe) | {', '.join(f'{k}: {v}' for k, v in f['statuses'].items())} |",
        f"| accepted episodes / pooled (journal `add` records) | {f['accepted']} / {f['pooled']} |",
        f"| `/health` probes (every {HEALTH_INTERVAL_S:g} s, own process) | {f['health_probes']}, median "
        f"{f['health_p50_s']:.3f} s, worst {f['health_worst_s']:.3f} s, {f['health_over_limit']} over {result['health_limit_s']:g} s |",
        f"| server RSS idle / peak / final | {f['rss_idle_mib']} / {f['rss_peak_mib']} / {f['rss_final_mib']} MiB "
        f"(bound: idle + {result['rss_headroom_mib']} MiB = {f['rss_limit_mib']} MiB) |",
        f"| audit of the run dir | {'holds' if result['audit']['ok'] else result['audit']['violations']} |",
        "",
        f"Target (timing, not a check): worst `/health` latency under {result['health_limit_s']:g} s: "
        + ("met." if not result["target_misses"] else "; ".join(result["target_misses"]) + ".")
        + slowest,
        "",
    ]
    if result["violations"]:
        lines += ["Violations:", "", *[f"- {v}" for v in result["violations"]], ""]
    lines += [
        "What the checks are (see the docstring of `benchmarks/server_load.py`): no 5xx and every probe "
        "answered; every accepted episode pooled exactly once and nothing else pooled; each pooled episode's "
        "trainable blocks exactly the replies its client received whole (a cut-off call, which asked for "
        f"{LONG_TOKENS} tokens, is not trained: issue 26 defect 2); peak RSS within the bound. The bound is idle "
        f"RSS plus a fixed headroom ({result['rss_headroom_mib']} MiB, about the idle server's size): memory that grows "
        "with the traffic (an unbounded buffer, generations that keep running after their client left) would pass it. "
        f"The final RSS stayed {f['rss_final_mib'] - f['rss_idle_mib']:.0f} MiB above idle after the load (the pooled "
        "episodes and the allocator's caches; not broken down here).",
        "",
        "Not covered: training under load (the pool trigger is out of reach), other models, remote clients.",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=64, help="episodes, all at once")
    ap.add_argument("--calls", type=int, default=4, help="calls per episode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stream-share", type=float, default=0.5, help="share of calls streamed")
    ap.add_argument("--hangup-share", type=float, default=0.3, help="share of episodes with one call that hangs up")
    ap.add_argument("--abort-share", type=float, default=0.1, help="share of episodes aborted instead of ended")
    ap.add_argument("--health-limit-s", type=float, default=1.0, help="target for the worst /health latency")
    ap.add_argument("--rss-headroom-mib", type=int, default=512, help="peak RSS bound: idle RSS plus this")
    ap.add_argument("--development", action="store_true", help="mark the report a development run (loaded machine)")
    ap.add_argument("--work", type=Path, default=None, help="where the run dir and logs go (default: a temporary dir, removed)")
    ap.add_argument("--out", type=Path, default=None, help="result JSON")
    ap.add_argument("--md", type=Path, default=None, help="markdown report")
    ap.add_argument("--probe", nargs=3, metavar=("URL", "PID", "OUT"), help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.probe:
        probe(args.probe[0], int(args.probe[1]), Path(args.probe[2]), HEALTH_INTERVAL_S)
        return {}
    load_before = loadavg()
    work = args.work or Path(tempfile.mkdtemp(prefix="server-load-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run = run_load(args, work)
    finally:
        if args.work is None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    limit = run["rss"]["idle"] + args.rss_headroom_mib * 2**20
    checked = check_load(run["episodes"], run["journal"], run["health"], run["rss"], rss_limit=limit,
                         health_limit_s=args.health_limit_s)
    result = {
        "command": "python benchmarks/server_load.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "seed": args.seed, "calls": args.calls, "development": args.development,
        "health_limit_s": args.health_limit_s, "rss_headroom_mib": args.rss_headroom_mib,
        "load_s": round(run["load_s"], 2), "pool": run["pool"], "audit": run["audit"],
        **checked,
        # the slowest probes, with when they were sent, in seconds into the load (negative: before it)
        "worst_health": [{**h, "t": round(h["t"] - run["load_window"][0], 3)} for h in sorted(
            (h for h in run["health"] if h["status"] is not None), key=lambda h: -h["latency_s"])[:5]],
        "machine": machine_record(load_before),
    }
    print(json.dumps({k: result[k] for k in ("violations", "target_misses", "figures")}, indent=1), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.md:
        args.md.write_text(markdown(result))
    return result


if __name__ == "__main__":
    main()
