"""The client process of `vibe train` (it runs in the tmux session's `client` window).

It starts the swarm server as its own subprocess (engine.jobs.ServerProcess: loopback, fresh admin token,
exits with this process, log in RUN/server.log, which the `server` window follows) and, for a client
with `second_server_roles`, a second one (RUN/server-2.log, window `server-2`), configures them from
vibe.yaml, and plays B tasks x N episodes per step until `--steps` training steps are done. The client's
code runs only in the sandbox: each step's plays in one `vibe.children.play_episodes` child, which reaches
the servers over vibe.netbridge and gives up a play after `episode_timeout_s`. After every
step it appends the rewards to RUN/rewards.jsonl (each role's own figures too, for a client with ROLES)
and rewrites RUN/status.json; training whose every group had equal rewards `flat_steps` steps running is
flagged there and on screen at once.

With `--warm-start N` it first trains N supervised steps on the training tasks' gold answers
(engine.training.supervised, the registry's nll loss) and starts every server from that checkpoint
(RUN/warm_start/): the optional supervised warm start before RL.

A resumed run: a server restarted in RUN trains, by itself, every full batch its pool journal gives back
(episodes accepted but not yet checkpointed). The client waits for that before it plays, logs those steps
as replayed rows with the server's figures, and its own plays make the next step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

from engine.jobs import ServerProcess, held_episodes
from engine.server.state import ServerState
from engine.training.metrics import read_run_metrics
from engine.training.supervised import supervise
from vibe.config import VibeJob
from vibe.exceptions import VibeError
from vibe.jsonl import read_jsonl
from vibe.judge_link import judge_access
from vibe.layout import CONFIG_FILE, TRAIN_FILE
from vibe.netbridge import UnixToTcp
from vibe.play import split_roles
from vibe.private import write_private
from vibe.progress import FLAT_FLAG, flat_streak, read_rewards, replayed_rows
from vibe.sandbox import SandboxLimits, limits_note, run_sandboxed, tail
from vibe.stats import FlatCause, component_stats, flat_cause, group_spreads, mean_std


def _write_status(run_dir: Path, **status) -> None:
    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status))
    os.replace(tmp, run_dir / "status.json")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _append_rows(run_dir: Path, rows: list[dict]) -> None:
    with open(run_dir / "rewards.jsonl", "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def _settle(clients: list, timeout: float = 3600.0) -> int:
    """The lowest step of the servers once none is training on its own. A restarted server first trains
    the full batches its pool journal gave back; a server seen ROLLING has no batch ready (it checks on
    entering ROLLING, in the same event-loop turn), so plays sent after this land in the next step."""
    deadline = time.monotonic() + timeout
    steps = []
    for c in clients:
        while (st := c.status())["state"] != ServerState.ROLLING.value:
            if st.get("error"):
                raise VibeError(f"the server failed while training its replayed episodes: {st['error']}")
            if time.monotonic() > deadline:
                raise VibeError(f"the server was still training replayed episodes after {timeout:.0f} s")
            time.sleep(0.2)
        steps.append(int(st["global_step"]))
    return min(steps)


RETRIES = 2  # a play that raises (a dropped connection, a flaky tool) is aborted and played again


def _is_held(held: set[tuple[str, int]], task_id: str, index: int, roles: list[str]) -> bool:
    """Whether a server holds play `index` of `task_id` (any of its role episodes, for a game: a group is
    committed on every server at once)."""
    return any((tid, index) in held for tid in ([f"{task_id}:{r}" for r in roles] if roles else [task_id]))


def _client_roles(root: Path, job: VibeJob) -> list[str]:
    """client.py's ROLES, read by importing it in the sandbox (with the reward probes, which are cheap)."""
    res = run_sandboxed("vibe.children.import_and_probe", [str(root), "--limits", job.probe_limits().model_dump_json()],
                        root=root, name="train-import", limits=SandboxLimits(job.check.timeout_s, job.check.memory_mb))
    if res.result is None:
        raise VibeError(f"importing the client in the sandbox failed (exit {res.returncode}); run `vibe check "
                        f"{root}`; log tail:\n{res.log_tail}")
    return res.result["stats"].get("roles", [])


def _play_step(root: Path, run_dir: Path, job: VibeJob, items: list[tuple[str, int, dict]], connect: list[str],
               bridges: Path) -> list[dict]:
    """Play `items` ((task id, index in its group, task) each) in one sandboxed child; its records, or VibeError naming the
    first play that failed (after RETRIES more tries) or ran past episode_timeout_s."""
    plays = run_dir / "plays.json"
    plays.write_text(json.dumps(items))
    waves = math.ceil(len(items) / job.concurrency)
    limits = SandboxLimits(job.episode_timeout_s * (RETRIES + 1) * waves + 120, job.check.memory_mb)
    res = run_sandboxed("vibe.children.play_episodes",
                        [str(root), *connect, "--plays", str(plays), "--episode-timeout", str(job.episode_timeout_s),
                         "--retries", str(RETRIES)],
                        root=root, name="train-step", limits=limits, readable=[run_dir, bridges])
    if res.result is None:
        why = "was stopped at its time limit" if res.timed_out else f"exited with code {res.returncode}"
        raise VibeError(f"the client process {why} ({limits_note(limits)}); log tail:\n{res.log_tail or '(empty)'}")
    records = res.result["episodes"]
    failed = [r for r in records if "error" in r]
    if failed:
        # the groups of those tasks can never fill, so the servers would wait for them forever
        tries = "" if failed[0].get("timed_out") else f" {RETRIES + 1} times"
        raise VibeError(f"{len(failed)} play(s) failed{tries}; first: task {failed[0]['task_id']}: {failed[0]['error']}")
    return records


def _server_config(job: VibeJob, run_dir: Path, steps: int, groups_per_task: int):
    """The job's swarm config for one server: B tasks x (its roles) groups per step, to `steps`."""
    pool = job.swarm.pool.model_copy(update={"batch_size": job.swarm.pool.batch_size * groups_per_task})
    return job.swarm.model_copy(update={
        "run_dir": str(run_dir), "pool": pool, "training": job.swarm.training.model_copy(update={"max_steps": steps})})


WARM_START_DIR = "warm_start"  # in the run dir: the supervised checkpoint every server starts from


def warm_start(job: VibeJob, tasks: list[dict], run_dir: Path, steps: int) -> VibeJob:
    """Supervised steps on the training tasks' (prompt, gold) pairs with the nll loss; the job with its
    model (both servers' starting point) replaced by the saved checkpoint."""
    out = run_dir / WARM_START_DIR
    pairs = [(str(t["id"]), str(t["prompt"]), str(t["gold"])) for t in tasks]
    print(f"[vibe] warm start: {steps} supervised step(s) on {len(pairs)} gold answer(s) -> {out}", flush=True)
    done = supervise(job.swarm.model, pairs, out, steps=steps, batch=min(16, len(pairs)), lr=job.swarm.training.lr)
    print(f"[vibe] warm start done: nll {done['nll_first']:.3f} -> {done['nll_last']:.3f} in {done['wall_s']:.0f} s",
          flush=True)
    model = job.swarm.model.model_copy(update={"name": str(out.resolve())})
    return job.model_copy(update={"swarm": job.swarm.model_copy(update={"model": model})})


def train(root: Path, run_dir: Path, steps: int, warm_start_steps: int = 0) -> None:
    flags: list[dict] = []
    servers: list[ServerProcess] = []
    try:
        job = VibeJob.load(root / CONFIG_FILE)
        tasks = read_jsonl(root / TRAIN_FILE)[0]
        if warm_start_steps > 0:
            _write_status(run_dir, state="warm-start", step=0, steps=steps, flags=flags)
            job = warm_start(job, tasks, run_dir, warm_start_steps)
        B, N = job.swarm.pool.batch_size, job.swarm.pool.group_size
        roles = _client_roles(root, job)
        # roles per server: each role of a task is its own group there
        sides = split_roles(roles, job.second_server_roles) if roles else [[]]
        with ExitStack() as stack:
            stack.enter_context(judge_access(job.judge))  # reward.py's LLM judge, reached from the sandbox
            clients = []
            for i, side in enumerate(sides):
                tag = "" if i == 0 else f"-{i + 1}"  # server 2's files: server-2.log, admin_token-2, ...
                sdir = run_dir if i == 0 else run_dir / f"server{tag}"
                sdir.mkdir(exist_ok=True)
                servers.append(ServerProcess(sdir, log_path=run_dir / f"server{tag}.log"))
                write_private(run_dir / f"admin_token{tag}", servers[-1].token)  # for `swarm top` while it runs
                (run_dir / f"server_url{tag}").write_text(servers[-1].url + "\n")
                client = stack.enter_context(servers[-1].client("vibe-train"))
                client.configure(_server_config(job, sdir, steps, max(1, len(side))))
                clients.append(client)
            for c in clients:
                c.start(wait=True)
            step = _settle(clients)
            logged = max((r["step"] for r in read_rewards(run_dir)), default=0)
            if step > logged:  # a restarted server trained its journal's full batches before we played
                _append_rows(run_dir, replayed_rows(logged, step + 1, read_run_metrics(run_dir)))
            # Episodes a restarted server replayed from its journal into a batch not yet full train as they
            # are: played again they would not be accepted (an index names one episode), wasted work that the
            # step's row would count.
            held = set().union(*(held_episodes(c.status()["pool"].get("held", {})) for c in clients))
            if held:
                print(f"[vibe] the server(s) hold {len(held)} episodes from before a restart; their plays are "
                      "not played again", flush=True)
            # client code runs in the sandbox, which reaches each server's port over a unix socket
            bridges = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vibe-bridge-")))
            connect: list[str] = []
            for i, server in enumerate(servers):
                sock = bridges / f"server-{i + 1}.sock"
                stack.enter_context(UnixToTcp(sock, urlsplit(server.url).port))
                tag = "" if i == 0 else f"-{i + 1}"
                connect += [f"--url-{i + 1}", server.url, f"--token-file-{i + 1}", str(run_dir / f"admin_token{tag}"),
                            f"--bridge-{i + 1}", str(sock)]
            print(f"[vibe] {len(clients)} server(s) ROLLING at step {step}: {job.swarm.model.name}, {B} tasks x {N} "
                  "plays per step" + "".join(f"; server {i + 1}: {', '.join(side)}" for i, side in enumerate(sides) if side),
                  flush=True)
            _write_status(run_dir, state="running", step=step, steps=steps, flags=flags)
            while step < steps:
                batch = [tasks[(step * B + k) % len(tasks)] for k in range(B)]
                # a task is (step, position): a task drawn twice is two groups of N, never one of 2N
                items = [(tid, r, t) for k, t in enumerate(batch) for r in range(N)
                         if not _is_held(held, tid := f"s{step}:{k}:{t['id']}", r, roles)]
                try:  # the step's row covers the episodes played now (replayed ones are in the server's metrics)
                    episodes = _play_step(root, run_dir, job, items, connect, bridges) if items else []
                except VibeError as e:
                    raise VibeError(f"step {step + 1}: {e}") from None
                before, step = step, min(c.wait_for_step(step + 1, timeout=3600)["global_step"] for c in clients)
                if step > before + 1:  # the server also trained episodes replayed from its journal
                    _append_rows(run_dir, replayed_rows(before, step, read_run_metrics(run_dir)))
                totals = [math.fsum(e["components"].values()) for e in episodes]
                spreads = group_spreads(episodes)
                mean, std = mean_std(totals)
                record = {"step": step, "reward_mean": mean, "reward_std": std, "episodes": len(totals),
                          "groups": len(spreads),
                          "flat_groups": sum(1 for s in spreads.values() if s == 0.0),
                          "components": component_stats(episodes)}
                if roles:  # each side's own figures (in a shared game the sides' win rates sum to one)
                    record["roles"] = {r: component_stats([e for e in episodes if e["task_id"].endswith(f":{r}")])
                                       for r in roles}
                _append_rows(run_dir, [record])
                print(f"[vibe] step {step}/{steps} reward {mean:.3f} +- {std:.3f} ({record['flat_groups']}/"
                      f"{record['groups']} groups without variance)", flush=True)
                streak = flat_streak(read_rewards(run_dir))
                if streak >= job.flat_steps and not any(f["code"] == FLAT_FLAG for f in flags):
                    flat = flat_cause(episodes, job.reward_min)
                    why = ("the model earned reward_min on every episode of the last step, so RL has nothing to "
                           f"reinforce; restart with a supervised warm start: `vibe train {root} --warm-start N`"
                           if flat is not None and flat[0] is FlatCause.NO_REWARD else
                           "task too hard or too easy for the model, or a reward that ignores the answer")
                    flags.append({"code": FLAT_FLAG, "step": step, "message":
                                  f"every group had equal rewards for {streak} steps running: there is no learning "
                                  f"signal ({why})"})
                    print(f"[vibe] WARNING {flags[-1]['message']}", flush=True)
                _write_status(run_dir, state="running", step=step, steps=steps, flags=flags)
            _write_status(run_dir, state="done", step=step, steps=steps, flags=flags)
    except Exception as e:  # noqa: BLE001 - whatever stopped the run is reported in status.json and on screen
        error = f"{type(e).__name__}: {e}"
        _write_status(run_dir, state="failed", step=None, steps=steps, flags=flags, error=error)
        with open(run_dir / "client.traceback", "w") as f:
            traceback.print_exc(file=f)
        print(f"[vibe] training stopped: {error}\n[vibe] server log tail:\n{tail(_read(run_dir / 'server.log'), 15)}\n"
              f"[vibe] traceback in {run_dir / 'client.traceback'}", flush=True)
        raise SystemExit(1) from None
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warm-start", type=int, default=0)
    args = p.parse_args()
    train(Path(args.root), Path(args.run_dir), args.steps, args.warm_start)


if __name__ == "__main__":
    main()
