"""Werewolf rollouts with and without the server's prefix cache: which setting the werewolf benchmark uses.

Every werewolf player keeps one conversation and re-sends it, extended, on each call (engine.tasks.werewolf,
Memory): without the cache the server prefills a player's whole conversation again on every call. Per
repeat and cache budget (`--cache-mib`, 0 = off; order rotated every repeat), a fresh `swarm serve` of the
untrained model plays the same `--eval` held-out deals greedy in both seats, exactly as the benchmark's
baseline does (benchmarks/werewolf.py `evaluate`), and the wall of those games is timed (the server's
start is not). Reported: each budget's median seconds and the ratio uncached / cached per repeat as
median (min-max), with the load before and after; and whether the games' outcomes matched across budgets
(greedy, so they differ only where float rounding flips an argmax).

    # the figure on docs/benchmarks/werewolf_rollout.md (the game's flags are benchmarks/werewolf.py's;
    # without them its defaults apply: 24 deals, 16 in flight)
    python benchmarks/werewolf_rollout.py --setups 5x1,6x1 --eval 8 --repeats 3 --cache-mib 0 2048 --concurrency 8
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import werewolf as bench  # noqa: E402
from benchmarks.common import fmt_spread, loadavg, machine_record, rotated, spread  # noqa: E402
from engine.tasks.base import split_items  # noqa: E402
from engine.tasks.werewolf import Side  # noqa: E402
from engine.teams.train import ServerFactory  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-mib", type=int, nargs="+", default=[0, 2048], help="budgets compared; 0 is off")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", default="runs/werewolf-rollout")
    ap.add_argument("--out", default="docs/benchmarks/werewolf_rollout", help="writes OUT.json and OUT.md")
    # The game: the werewolf benchmark's own flags, with its defaults unless given here.
    args, rest = ap.parse_known_args(argv)
    args.game = bench.parse_args([*rest, "--seeds", "2"])
    if 0 not in args.cache_mib or len(args.cache_mib) < 2:
        ap.error("--cache-mib must include 0 (off) and at least one budget to compare with it")
    return args


def timed_games(args: argparse.Namespace, mib: int, repeat: int, factory: ServerFactory) -> tuple[float, list[str]]:
    """Seconds for the held-out games on a fresh server with `mib` of prefix cache, and each game's winner."""
    game = argparse.Namespace(**{**vars(args.game), "prefix_cache_mib": mib})
    run_dir = Path(args.work) / f"cache{mib}-r{repeat}"
    bench.fresh_dir(run_dir)
    srv, client = bench.start_server(bench.server_config(game, run_dir, 1), run_dir, factory)
    try:
        _, held = split_items(game.task, 0, game.eval, 0)
        t0 = time.monotonic()
        games = bench.evaluate(client, client, Side(game.side), held, game.max_tokens, game.concurrency)
        return time.monotonic() - t0, [g.winner.value for g in games]
    finally:
        client.close()
        srv.stop()


def main(argv: list[str] | None = None, server_factory: ServerFactory = bench.server_process) -> dict:
    args = parse_args(argv)
    load_before = loadavg()
    seconds: dict[int, list[float]] = {m: [] for m in args.cache_mib}
    winners: dict[int, list[list[str]]] = {m: [] for m in args.cache_mib}
    for r in range(args.repeats):
        for mib in rotated(args.cache_mib, r):
            s, w = timed_games(args, mib, r, server_factory)
            seconds[mib].append(s)
            winners[mib].append(w)
            print(f"repeat {r + 1}/{args.repeats}, cache {mib} MiB: {s:.1f} s for {len(w)} games, load {loadavg()}",
                  file=sys.stderr)
    ratios = {m: spread([off / on for off, on in zip(seconds[0], seconds[m], strict=True)])
              for m in args.cache_mib if m}
    game = {k: v for k, v in vars(args.game).items() if k not in ("task", "seeds", "smoke", "out", "work")}
    result = {
        "command": " ".join(["python", "benchmarks/werewolf_rollout.py", *(argv if argv is not None else sys.argv[1:])]),
        "game": game, "seconds": {str(m): spread(v) for m, v in seconds.items()},
        "uncached_over_cached": {str(m): v for m, v in ratios.items()},
        "same_winners_as_uncached": {str(m): winners[m] == winners[0] for m in args.cache_mib if m},
        "machine": machine_record(load_before),
    }
    lines = [
        "# Werewolf rollouts: the server's prefix cache on and off", "",
        f"Command: `{result['command']}`", "",
        f"{args.game.eval} held-out deals (shapes {args.game.setups}, at most {args.game.max_rounds} rounds), "
        f"greedy, max_tokens {args.game.max_tokens}, {args.game.concurrency} games in flight, model "
        f"{args.game.model}; a fresh server per timing, {args.repeats} repeats, order rotated.", "",
        "| cache | seconds, median (min-max) | uncached / cached | same winners as uncached |", "| --- | --- | --- | --- |",
        *[f"| {m} MiB | {fmt_spread(result['seconds'][str(m)], 1, ' s')} | "
          + ("-" if not m else fmt_spread(ratios[m])) + " | "
          + ("-" if not m else str(result["same_winners_as_uncached"][str(m)])) + " |" for m in args.cache_mib],
        "", f"Machine: {result['machine']['platform']}, {result['machine']['cpu_count']} CPUs, load before "
        f"{load_before}, after {result['machine']['loadavg_after']}.",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
