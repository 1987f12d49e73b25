"""Werewolf at CPU scale: does training one side beat the untrained model, and does sharing parameters
between the sides help or hurt (the swarm paper's shared against non-shared comparison)?

Per seed, two arms train the same side (`--side`, default the village) for `--steps` steps of `--games`
deals x `--group` games (a GRPO group per deal and trained side), from the same untrained model:
- shared: one model plays both sides (self-play) and trains on both sides' episodes, each side under its
  own task ids (engine.tasks.werewolf, SHARED mode): twice the samples per step, a moving opponent.
- non-shared: the trained side's model on its own server; the opponent is the untrained model on a second
  server, held fixed (its episodes are eval episodes, never trained).
Then the trained side's model plays the held-out deals (the same for every seed and arm, none of them
trained on) against the untrained model, greedy. Reported: its win rate minus the baseline (the untrained
model in both seats, on the same deals), with t intervals over seeds; the paired difference shared minus
non-shared; and per role (werewolf, seer, villager) the share of invalid moves (abstentions), with the
seer's finds per game.

    python benchmarks/werewolf.py --out docs/benchmarks/werewolf_results

The defaults are the size docs/benchmarks/werewolf.md states and why (3 seeds, 6 steps of 2 deals x 4 games,
games of 5-6 players, 24 held-out deals, every server with a 2 GiB prefix cache, which
benchmarks/werewolf_rollout.py measured side by side with none): hours of CPU, not days.

Power: each interval's half-width is the smallest effect that many seeds can tell from zero, and the page
says so beside it; one seed's win rate over K held-out games also carries binomial noise sqrt(p(1-p)/K).
Seeds vary the training deals and the sampling streams (task ids); the model's weights and the held-out
deals are the same in every run, so the untrained baseline is measured once.

Resuming (a run spread over sessions): each finished run is saved in `RESULTS/ARM-sSEED.json`, the baseline
in `RESULTS/baseline.json`, with the settings that shape it (OUTCOME_SETTINGS, --concurrency included).
RESULTS (`--results`, default OUT_runs beside the page: docs/benchmarks/werewolf_results_runs/) is small and
meant to be committed, because a session's scratch (`--work`: run dirs, checkpoints, logs) does not always
outlive it, and a finished run of an hour must not be lost with it. The same command reuses what is
finished, trains the rest, and with nothing left starts no server; a result saved under other settings is
refused, never mixed in. A run killed mid-way
resumes after its last finished step: every step is checkpointed and its training curve saved
(`progress.json`), and when the newest checkpoint is of that step the server resumes from it. The step it
was killed in is played again from the start; episodes of it that the server had already pooled (sampled
by the same weights) stay in its pool and train with it. Otherwise (no checkpoint of the last saved step)
the run dir is emptied and the run trained from the start. A finished run deletes its checkpoints.
`wall_s` is this invocation's; each run keeps the wall of the sessions that trained it (of the last only,
when it was resumed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis.stats import t_interval  # noqa: E402
from benchmarks.common import git, loadavg, machine_record  # noqa: E402
from engine.client import EpisodeGroup, SwarmClient  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.fsutil import atomic_write_text  # noqa: E402
from engine.jobs import ServerProcess  # noqa: E402
from engine.tasks import werewolf as ww  # noqa: E402
from engine.tasks.base import split_items  # noqa: E402
from engine.tasks.werewolf import GameResult, Role, Side  # noqa: E402
from engine.teams.train import AgentServer, ServerFactory  # noqa: E402
from engine.training.checkpoint import checkpoints_dir, latest_checkpoint, read_state  # noqa: E402

ARMS = ("shared", "non-shared")
OTHER = {Side.VILLAGE: Side.WEREWOLVES, Side.WEREWOLVES: Side.VILLAGE}
# The arguments that change a run's outcome, saved with its result and compared before it is reused.
# --concurrency is one: the pool orders a step's batch by arrival and the trainer cuts it in that order into
# mini-batches, and concurrent requests decode batched (logits rounded with their neighbours), so the number
# of games in flight changes what trains together. Not --seeds (the seed is in the run's name), --out, --work.
OUTCOME_SETTINGS = ("model", "side", "steps", "games", "group", "eval", "setups", "max_rounds", "lr", "max_tokens",
                    "concurrency", "prefix_cache_mib")
# The baseline (greedy games of the untrained model on the held-out deals) does not depend on training.
# The prefix cache is in both: a cached prefix's KV was computed in another pass shape (float rounding).
BASELINE_SETTINGS = ("model", "side", "eval", "setups", "max_rounds", "max_tokens", "concurrency", "prefix_cache_mib")
PROGRESS = "progress.json"  # in each run dir while it trains: the curve so far, to resume after a kill
BASELINE = "baseline.json"  # in --results, beside one ARM-sSEED.json per finished run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--side", choices=[s.value for s in Side], default=Side.VILLAGE.value, help="the side trained")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--games", type=int, default=2, help="deals per step")
    ap.add_argument("--group", type=int, default=4, help="games per deal (the GRPO group size)")
    ap.add_argument("--eval", type=int, default=24, help="held-out deals")
    ap.add_argument("--setups", default="5x1,6x1", help="game shapes dealt: PLAYERSxWEREWOLVES, comma-separated")
    ap.add_argument("--max-rounds", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--prefix-cache-mib", type=int, default=2048,
                    help="each server's prefix cache (inference.prefix_cache_mib): a player's next call re-sends its "
                    "conversation, whose KV the cache keeps; 0 turns it off")
    ap.add_argument("--smoke", action="store_true", help="tiny model, 2 seeds, 1 step, 2 held-out deals (flags given beside it win)")
    ap.add_argument("--out", default="docs/benchmarks/werewolf_results", help="writes OUT.json and OUT.md")
    ap.add_argument("--work", default="runs/werewolf-bench", help="the servers' run dirs, checkpoints and logs (scratch)")
    ap.add_argument("--results", help="the finished runs and the baseline, one small JSON each, to commit "
                    "(default: OUT_runs beside the page)")
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke's settings are defaults: a flag given beside --smoke wins (--smoke --lr 2e-3)
        ap.set_defaults(model="tiny", seeds=2, steps=1, games=1, group=2, eval=2,
                        max_tokens=4, lr=1e-3, setups="3x1", max_rounds=1)  # ~8 calls a game
        args = ap.parse_args(argv)
    args.results = args.results or f"{args.out}_runs"
    try:
        args.task = ww.Werewolf(tuple(tuple(int(x) for x in s.split("x")) for s in args.setups.split(",")), args.max_rounds)
    except ValueError as e:
        ap.error(f"--setups {args.setups!r}: {e} (write e.g. 5x1,7x2)")
    if args.seeds < 2:
        ap.error("--seeds must be at least 2: the intervals are over seeds")
    return args


def server_config(args: argparse.Namespace, run_dir: Path, batch: int) -> SwarmConfig:
    small = args.model == "tiny"
    return SwarmConfig.model_validate({
        "model": {"name": args.model}, "run_dir": str(run_dir),
        "inference": {"prefix_cache_mib": args.prefix_cache_mib},
        "pool": {"batch_size": batch, "group_size": args.group},
        # One sample per micro-batch: a merged sample is a player's whole conversation (500-1500 tokens), and
        # 4 of them at once held 16 GB of activations, which the kernel's out-of-memory killer ended.
        "training": {"max_steps": args.steps, "lr": args.lr, "mini_batch_size": 4 if small else 16,
                     "micro_batch_size": 2 if small else 1,
                     # A checkpoint per step lets a run killed between sessions resume (resumable()); the run
                     # deletes them once its result is saved.
                     "checkpoint_every": 1, "final_checkpoint": False},
    })


def server_process(run_dir: Path) -> AgentServer:
    return ServerProcess(run_dir, log_path=run_dir / "server.log", health_timeout_s=300)


def start_server(cfg: SwarmConfig, run_dir: Path, factory: ServerFactory) -> tuple[AgentServer, SwarmClient]:
    """A configured, ROLLING server from `factory` (a `swarm serve` subprocess unless a test injects one)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    srv = factory(run_dir)
    client = srv.client("werewolf-bench")
    try:
        client.configure(cfg)
        client.start(wait=True)
    except BaseException:
        client.close()
        srv.stop()
        raise
    return srv, client


def settings(args: argparse.Namespace, keys: tuple[str, ...] = OUTCOME_SETTINGS) -> dict[str, Any]:
    """The arguments named by `keys`, as they read back from JSON."""
    return json.loads(json.dumps({k: getattr(args, k) for k in keys}))


def save(path: Path, keys: dict[str, Any], result: dict) -> None:
    """Write a finished result with the settings it ran under, whole or not at all (a kill mid-write leaves
    no half file that a rerun would take for finished)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"settings": keys, "result": result}, indent=2))


def saved(path: Path, keys: dict[str, Any]) -> tuple[dict | None, list[str]]:
    """The result saved at `path` and [] when its settings are `keys`; (None, the settings that differ, each
    with both values) when it was saved under others; (None, []) when there is none."""
    if not path.exists():
        return None, []
    try:
        record = json.loads(path.read_text())
        theirs, result = record["settings"], record["result"]
    except (ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path} is not a result this benchmark saved ({e!r}): delete it to redo that run") from e
    diff = [f"{k} ({theirs.get(k)!r} there, {keys.get(k)!r} now)" for k in sorted(set(theirs) | set(keys))
            if theirs.get(k) != keys.get(k)]
    return (None, diff) if diff else (result, [])


def result_path(results: Path, arm: str, seed: int) -> Path:
    return results / f"{arm}-s{seed}.json"


def finished(args: argparse.Namespace, results: Path) -> tuple[dict | None, dict[tuple[str, int], dict]]:
    """The baseline and the runs (arm, seed) already finished in `results` under these settings. Refuses,
    before anything starts, every result saved under other settings: reusing it would report them under this
    command."""
    refused = []
    baseline, diff = saved(results / BASELINE, settings(args, BASELINE_SETTINGS))
    if diff:
        refused.append(f"{results / BASELINE}: {', '.join(diff)}")
    runs = {}
    for seed in range(args.seeds):
        for arm in ARMS:
            path = result_path(results, arm, seed)
            run, diff = saved(path, settings(args))
            if diff:
                refused.append(f"{path}: {', '.join(diff)}")
            elif run is not None:
                runs[(arm, seed)] = run
    if refused:
        raise SystemExit(f"{results} holds results saved under other settings:\n  " + "\n  ".join(refused) + "\n"
                         "Nothing was started. Pass another --results, or delete what is named above to redo it "
                         "with these settings.")
    return baseline, runs


def resumable(run_dir: Path, keys: dict[str, Any]) -> list[float]:
    """The training curve of an unfinished run that can go on: its progress was saved under these settings
    and its newest checkpoint is of the last step saved, so the server resumes there (weights, optimizer,
    pool). [] otherwise: the run starts over (a step trained after the last progress save, or none saved).
    A finished run deletes its checkpoints, so it never resumes."""
    progress, _ = saved(run_dir / PROGRESS, keys)
    ckpt = latest_checkpoint(run_dir)
    if progress is None or ckpt is None:
        return []
    curve = progress["train_win_rate"]
    return curve if read_state(ckpt).get("global_step") == len(curve) else []


def fresh_dir(run_dir: Path) -> None:
    """Empty a server's run dir before a new run: a killed run leaves its pool journal (episodes that a new
    server replays into its pool and trains on), metrics.jsonl and any checkpoints (a server resumes from
    checkpoints/latest). Refuses a non-empty folder that does not look like a server's run dir."""
    if not run_dir.exists():
        return
    if any(run_dir.iterdir()) and not any((run_dir / f).exists() for f in ("swarm_config.yaml", "server.log")):
        raise SystemExit(f"{run_dir} is in the way of a server's run dir and is not one (no swarm_config.yaml, "
                         "no server.log): pass another --work, or move it")
    shutil.rmtree(run_dir)


def play_fixed_opponent(trained: SwarmClient, fixed: SwarmClient, side: Side, items: list, group: int,
                        sampling: dict, prefix: str, concurrency: int) -> list[GameResult]:
    """`group` games of every item: `side` on `trained` (training episodes), its opponent on `fixed`
    (eval episodes: the opponent never trains)."""

    def one(job: tuple[int, int, Any]) -> GameResult:
        k, r, item = job
        tid = f"{prefix}{k}:{item.id}:{side.value}"
        with trained.episode(tid, index=r) as mine, fixed.episode(tid, is_eval=True, index=r) as theirs:
            res = ww.play_episodes({side.value: mine, OTHER[side].value: theirs}, ww.item_setup(item), sampling,
                                random.Random(item.extra["deal_seed"]))
            mine.end(res.rewards()[side])
            theirs.end(res.rewards()[OTHER[side]])
        return res

    jobs = [(k, r, it) for k, it in enumerate(items) for r in range(group)]
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, jobs))


def evaluate(trained: SwarmClient, fixed: SwarmClient, side: Side, items: list, max_tokens: int,
             concurrency: int) -> list[GameResult]:
    """Every held-out deal once, greedy: `side` played by `trained`, its opponent by `fixed`."""
    greedy = {"temperature": 0.0, "max_tokens": max_tokens}
    clients = {side.value: trained, OTHER[side].value: fixed}

    def one(item) -> GameResult:
        ids = {k: f"eval:{item.id}:{k}" for k in clients}
        with EpisodeGroup(clients, ids, is_eval=True) as g:
            res = ww.play_episodes(g.episodes, ww.item_setup(item), greedy, random.Random(item.extra["deal_seed"]))
            g.commit({s.value: r for s, r in res.rewards().items()})
        return res

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, items))


def game_stats(results: list[GameResult], side: Side) -> dict[str, Any]:
    """Win rate of `side`, and per role the share of invalid moves; the seer's finds per game."""
    moves, invalid = Counter(), Counter()
    for r in results:
        moves.update(r.moves)
        invalid.update(r.invalid)
    return {
        "games": len(results),
        "win_rate": sum(r.winner is side for r in results) / len(results),
        "invalid_rate": {role.value: invalid[role] / moves[role] if moves[role] else None for role in Role},
        "seer_finds_per_game": sum(r.seer_found for r in results) / len(results),
        "rounds_mean": sum(r.rounds for r in results) / len(results),
    }


def train_arm(args: argparse.Namespace, arm: str, seed: int, fixed: SwarmClient, held: list, root: Path,
              factory: ServerFactory, commit: str) -> dict:
    """One arm of one seed: train from the untrained model in an emptied run dir, then evaluate against the
    fixed opponent; the result is saved in --results with its settings and `commit`, the code this process
    loaded (HEAD when the run ends may be later: a session commits while an hour-long run trains)."""
    side = Side(args.side)
    train_items, _ = split_items(args.task, args.games * args.steps, args.eval, seed)
    sampling = {"temperature": 1.0, "max_tokens": args.max_tokens}
    batch = args.games * (len(Side) if arm == "shared" else 1)  # GRPO groups per step
    run_dir = root / f"{arm}-s{seed}"
    curve = resumable(run_dir, settings(args))
    if curve:
        print(f"{arm} seed {seed}: resuming after step {len(curve)} from its checkpoint", file=sys.stderr)
    else:
        fresh_dir(run_dir)
    srv, client = start_server(server_config(args, run_dir, batch), run_dir, factory)
    t0, resumed_after = time.monotonic(), len(curve)
    try:
        for step in range(len(curve), args.steps):
            items = train_items[step * args.games:(step + 1) * args.games]
            prefix = f"seed{seed}:s{step}:"
            if arm == "shared":
                games = ww.play_games(ww.clients_for(ww.Mode.SHARED, client), items, args.group, sampling,
                                   args.concurrency, prefix)
            else:
                games = play_fixed_opponent(client, fixed, side, items, args.group, sampling, prefix, args.concurrency)
            client.wait_for_step(step + 1, timeout=3600)
            curve.append(sum(g.winner is side for g in games) / len(games))
            save(run_dir / PROGRESS, settings(args), {"train_win_rate": curve})
            print(f"{arm} seed {seed} step {step + 1}/{args.steps}: {side.value} won {curve[-1]:.2f} of training games",
                  file=sys.stderr)
        after = game_stats(evaluate(client, fixed, side, held, args.max_tokens, args.concurrency), side)
    except httpx.TransportError as e:
        raise server_died(f"{arm} seed {seed}", srv, run_dir, e) from e
    finally:
        client.close()
        srv.stop()
    # wall_s covers this invocation's steps only: a run resumed after step k says so (its earlier steps' wall
    # was spent in another session, under another load).
    result = {"arm": arm, "seed": seed, "train_win_rate": curve, "after": after, "wall_s": time.monotonic() - t0,
              "resumed_after_step": resumed_after, "git_commit": commit}
    save(result_path(Path(args.results), arm, seed), settings(args), result)
    shutil.rmtree(checkpoints_dir(run_dir), ignore_errors=True)  # 1.6 GB each for SmolLM2; the result is saved
    return {**result, "reused": False}


def server_died(what: str, srv: AgentServer, run_dir: Path, err: Exception) -> SystemExit:
    """The message for a server that stopped answering mid-run: how it ended when it is a process that did,
    where its log is, and that the finished runs are kept (a traceback would say none of it)."""
    proc = getattr(srv, "proc", None)
    rc = None
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            rc = proc.wait(timeout=10)  # a dying server may close its sockets before it is reaped
    if rc is None:
        how = f"stopped answering ({err}); if it was the fixed opponent's, see its log in {run_dir.parent / 'fixed'}"
    else:
        how = f"exited with code {rc}" + (" (SIGKILL: most often the kernel's out-of-memory killer; `dmesg` says)"
                                          if rc == -signal.SIGKILL else "")
    return SystemExit(f"{what}: its server {how}; its log: {run_dir / 'server.log'}. Nothing of this run is kept; "
                      "finished runs are, and the same command resumes from them.")


def interval(values: list[float]) -> dict[str, Any]:
    iv = t_interval(values)
    half = (iv.hi - iv.lo) / 2 if math.isfinite(iv.hi) else None
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "half_width": half, "values": values}


def summarise(runs: list[dict], baseline: dict) -> dict[str, Any]:
    """Gains over the baseline per arm, the paired shared - non-shared difference, per-role means."""
    by = {arm: sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"]) for arm in ARMS}
    gain = {arm: [r["after"]["win_rate"] - baseline["win_rate"] for r in rs] for arm, rs in by.items()}
    roles = {
        arm: {role.value: _mean([r["after"]["invalid_rate"][role.value] for r in rs]) for role in Role}
        for arm, rs in by.items()
    }
    return {
        "gain_over_baseline": {arm: interval(g) for arm, g in gain.items()},
        "shared_minus_non_shared": interval([a - b for a, b in zip(gain["shared"], gain["non-shared"], strict=True)]),
        "invalid_rate_by_role": {**roles, "baseline": baseline["invalid_rate"]},
        "seer_finds_per_game": {arm: _mean([r["after"]["seer_finds_per_game"] for r in rs]) for arm, rs in by.items()},
    }


def _mean(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def _fmt(iv: dict) -> str:
    if iv["half_width"] is None:
        return f"{iv['mean']:+.3f} (no interval: identical values)"
    return f"{iv['mean']:+.3f} [{iv['lo']:+.3f}, {iv['hi']:+.3f}] (n={iv['n']}, detectable ~{iv['half_width']:.3f})"


def page(result: dict) -> str:
    a, s = result["args"], result["summary"]
    rate = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [
        "# Werewolf: one side trained against the untrained model, shared against non-shared parameters", "",
        f"Command: `{result['command']}`", "",
        f"Model {a['model']}, side trained: {a['side']}, {a['seeds']} seeds, {a['steps']} steps of {a['games']} deals "
        f"x {a['group']} games (shapes {a['setups']}, at most {a['max_rounds']} rounds), {a['eval']} held-out deals (greedy), lr {a['lr']}, max_tokens {a['max_tokens']}.", "",
        f"Baseline (untrained in both seats): {a['side']} win rate {result['baseline']['win_rate']:.3f}.", "",
        "| arm | gain in win rate over the baseline, 95% t interval over seeds |", "| --- | --- |",
        *[f"| {arm} | {_fmt(s['gain_over_baseline'][arm])} |" for arm in ARMS],
        f"| shared - non-shared (paired by seed) | {_fmt(s['shared_minus_non_shared'])} |", "",
        "An interval that contains 0 is no effect at this scale; its half-width is the smallest effect these "
        "seeds could have shown.", "",
        "Invalid moves (abstentions) per role, mean over seeds:", "",
        "| role | baseline | shared | non-shared |", "| --- | --- | --- | --- |",
        *[f"| {role.value} | {rate(s['invalid_rate_by_role']['baseline'][role.value])} | "
          f"{rate(s['invalid_rate_by_role']['shared'][role.value])} | "
          f"{rate(s['invalid_rate_by_role']['non-shared'][role.value])} |" for role in Role],
        "", f"Seer's finds per game: baseline {result['baseline']['seer_finds_per_game']:.3f}, "
        + ", ".join(f"{arm} {rate(v)}" for arm, v in s["seer_finds_per_game"].items()) + ".", "",
        f"Machine: {result['machine']['platform']}, {result['machine']['cpu_count']} CPUs, load before "
        f"{result['machine']['loadavg_before']}, after {result['machine']['loadavg_after']}; {_wall(result)}",
    ]
    return "\n".join(lines) + "\n"


def _wall(result: dict) -> str:
    """The wall of this invocation, and when it reused earlier results, that it is not theirs."""
    reused = sum(r.get("reused", False) for r in result["runs"])
    if not reused and not result.get("baseline_reused"):
        return f"wall {result['wall_s']:.0f} s."
    what = f"{reused} of {len(result['runs'])} runs" + (" and the baseline" if result.get("baseline_reused") else "")
    return (f"wall {result['wall_s']:.0f} s for this invocation only: it reused {what}, finished earlier with the "
            "same settings (`--results`), whose walls and load are not in it. Each run's own training wall is "
            "`wall_s` in the JSON, from the session that trained it.")


def main(argv: list[str] | None = None, server_factory: ServerFactory = server_process) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    root, results = Path(args.work), Path(args.results)
    load_before, t0 = loadavg(), time.monotonic()
    commit = git("rev-parse", "HEAD")  # the code imported now is the code every run of this process trains with
    side = Side(args.side)
    _, held = split_items(args.task, 0, args.eval, 0)
    baseline, done = finished(args, results)
    baseline_reused = baseline is not None
    if baseline_reused:
        print(f"baseline: reused {results / BASELINE} (saved under the same settings)", file=sys.stderr)
    runs = {k: {**r, "reused": True} for k, r in done.items()}
    for arm, seed in runs:
        print(f"{arm} seed {seed}: reused the finished run {result_path(results, arm, seed)} (same settings)", file=sys.stderr)
    # Per seed the non-shared arm first: it trains half the tokens of the shared one (about 1 h against
    # 1 h 45 min at the default size), so a session that has to stop mid-way has finished more runs.
    todo = [(arm, seed) for seed in range(args.seeds) for arm in reversed(ARMS) if (arm, seed) not in runs]
    if baseline is None or todo:  # with everything finished, no server starts: only the page is rewritten
        fresh_dir(root / "fixed")
        fixed_srv, fixed = start_server(server_config(args, root / "fixed", 1), root / "fixed", server_factory)
        try:
            if baseline is None:
                baseline = game_stats(evaluate(fixed, fixed, side, held, args.max_tokens, args.concurrency), side)
                save(results / BASELINE, settings(args, BASELINE_SETTINGS), baseline)
            for arm, seed in todo:
                runs[(arm, seed)] = train_arm(args, arm, seed, fixed, held, root, server_factory, commit)
        finally:
            fixed.close()
            fixed_srv.stop()
    runs = [runs[(arm, seed)] for seed in range(args.seeds) for arm in ARMS]
    result = {
        "args": {k: v for k, v in vars(args).items() if k != "task"}, "command": shlex.join(["python", "benchmarks/werewolf.py", *(argv or sys.argv[1:])]),
        "baseline": baseline, "baseline_reused": baseline_reused, "runs": runs, "summary": summarise(runs, baseline),
        "machine": machine_record(load_before), "wall_s": time.monotonic() - t0,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(page(result))
    print(page(result))
    return result


if __name__ == "__main__":
    main()
