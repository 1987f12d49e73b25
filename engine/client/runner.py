"""A concurrent episode runner over a dataset, with retries and a rich progress bar."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from engine.client.client import Episode, SwarmClient

log = logging.getLogger("swarm.runner")

# The agent: given an open episode and one dataset item, run the workflow and return the reward.
EpisodeFn = Callable[[Episode, Any], float]


@dataclass
class RunnerResult:
    rewards: list[float | None]
    accepted: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def mean_reward(self) -> float:
        done = [r for r in self.rewards if r is not None]
        return sum(done) / len(done) if done else float("nan")


def run_episodes(
    client: SwarmClient,
    items: Sequence[Any],
    fn: EpisodeFn,
    task_id: Callable[[Any], str] = str,
    concurrency: int = 8,
    retries: int = 2,
    is_eval: bool = False,
    show_progress: bool = True,
) -> RunnerResult:
    """Run one episode per item with `concurrency` threads; a failed episode is aborted and retried.

    An item whose every attempt fails gets reward None and its error in `failures`; the run goes on.
    """
    result = RunnerResult(rewards=[None] * len(items))

    def one(i: int) -> tuple[int, float | None, bool, str | None]:
        last_err = None
        for attempt in range(retries + 1):
            try:
                with client.episode(task_id(items[i]), is_eval=is_eval) as ep:
                    reward = float(fn(ep, items[i]))
                    return i, reward, ep.end(reward).accepted, None
            except Exception as e:  # noqa: BLE001 - any agent failure is retried, then reported
                last_err = f"item {i} attempt {attempt + 1}: {type(e).__name__}: {e}"
                log.warning(last_err)
        return i, None, False, last_err

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), disable=not show_progress,
    )
    with progress, ThreadPoolExecutor(concurrency) as pool:
        bar = progress.add_task("eval" if is_eval else "episodes", total=len(items), info="")
        futures = [pool.submit(one, i) for i in range(len(items))]
        for fut in as_completed(futures):
            i, reward, accepted, err = fut.result()
            result.rewards[i] = reward
            result.accepted += accepted
            if err:
                result.failures.append(err)
            progress.update(bar, advance=1, info=f"mean reward {result.mean_reward:.3f}")
    return result
