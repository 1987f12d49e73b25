"""Concurrent runners over a dataset, with retries and a rich progress bar: one episode per item
(`run_episodes`) or one episode group across servers per item (`run_groups`, multi-model workflows)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from engine.client.client import Episode, SwarmClient
from engine.client.group import EpisodeGroup
from engine.errors import GroupInDoubt

log = logging.getLogger("swarm.runner")

# The agent: given an open episode and one dataset item, run the workflow and return the reward.
EpisodeFn = Callable[[Episode, Any], float]
# A multi-model workflow: given an episode group (role -> episode) and an item, return role -> reward.
GroupFn = Callable[[EpisodeGroup, Any], dict[str, float]]


@dataclass
class RunnerResult:
    rewards: list[float | None]  # per item; a group's is the mean over its roles
    accepted: int = 0
    failures: list[str] = field(default_factory=list)
    role_rewards: list[dict[str, float] | None] = field(default_factory=list)  # per item, groups only

    @property
    def mean_reward(self) -> float:
        done = [r for r in self.rewards if r is not None]
        return sum(done) / len(done) if done else float("nan")

    def mean_by_role(self) -> dict[str, float]:
        by: dict[str, list[float]] = {}
        for d in self.role_rewards:
            for role, r in (d or {}).items():
                by.setdefault(role, []).append(r)
        return {role: sum(v) / len(v) for role, v in by.items()}


# One attempt at item i: (reward, per-role rewards or None, accepted count).
_Attempt = Callable[[int], tuple[float, dict[str, float] | None, int]]


def _run(n: int, attempt: _Attempt, concurrency: int, retries: int, label: str, show_progress: bool) -> RunnerResult:
    result = RunnerResult(rewards=[None] * n, role_rewards=[None] * n)

    def one(i: int):
        last_err = None
        for k in range(retries + 1):
            try:
                return i, *attempt(i), None
            except GroupInDoubt as e:  # decided (commit), only not confirmed yet: a rerun would count it twice
                last_err = f"item {i}: {e}"
                log.warning(last_err)
                break
            except Exception as e:  # noqa: BLE001 - any agent failure is retried, then reported
                last_err = f"item {i} attempt {k + 1}: {type(e).__name__}: {e}"
                log.warning(last_err)
        return i, None, None, 0, last_err

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), disable=not show_progress,
    )
    with progress, ThreadPoolExecutor(concurrency) as pool:
        bar = progress.add_task(label, total=n, info="")
        for fut in as_completed([pool.submit(one, i) for i in range(n)]):
            i, reward, roles, accepted, err = fut.result()
            result.rewards[i] = reward
            result.role_rewards[i] = roles
            result.accepted += accepted
            if err:
                result.failures.append(err)
            progress.update(bar, advance=1, info=f"mean reward {result.mean_reward:.3f}")
    return result


def ranks_within_task(task_ids: Sequence[str]) -> list[int]:
    """Each position's rank among the earlier positions with the same task id: [a, b, a, a] -> [0, 0, 1, 2]."""
    seen: dict[str, int] = {}
    ranks = []
    for t in task_ids:
        ranks.append(seen.get(t, 0))
        seen[t] = ranks[-1] + 1
    return ranks


def run_episodes(
    client: SwarmClient,
    items: Sequence[Any],
    fn: EpisodeFn,
    task_id: Callable[[Any], str] = str,
    concurrency: int = 8,
    retries: int = 2,
    is_eval: bool = False,
    show_progress: bool = True,
    index: Callable[[int], int] | None = None,
) -> RunnerResult:
    """Run one episode per item with `concurrency` threads; a failed episode is aborted and retried.

    An item whose every attempt fails gets reward None and its error in `failures`; the run goes on.
    Each episode is numbered among the items of its task (`index(i)` for item i, by default its rank
    among the items with the same task id), so the server seeds its sampling the same way in every run
    and every retry, whatever order the threads reach it in.
    """
    task_ids = [task_id(it) for it in items]
    if index is None:
        index = ranks_within_task(task_ids).__getitem__

    def attempt(i: int):
        with client.episode(task_ids[i], is_eval=is_eval, index=index(i)) as ep:
            reward = float(fn(ep, items[i]))
            return reward, None, int(ep.end(reward).accepted)

    return _run(len(items), attempt, concurrency, retries, "eval" if is_eval else "episodes", show_progress)


def run_groups(
    clients: dict[str, SwarmClient],
    items: Sequence[Any],
    fn: GroupFn,
    task_id: Callable[[Any], str | dict[str, str]] = str,
    concurrency: int = 8,
    retries: int = 2,
    is_eval: bool = False,
    show_progress: bool = True,
    index: Callable[[int], int] | None = None,
) -> RunnerResult:
    """Run one episode group (role -> server) per item; each group commits on every server or none.

    A failed workflow aborts its group everywhere and is retried; `accepted` counts accepted episodes.
    `task_id` gives one id for every role or one per role (see `EpisodeGroup`); `index(i)` numbers item
    i's episodes among their task's (default: none, the server numbers them).
    """

    def attempt(i: int):
        with EpisodeGroup(clients, task_id(items[i]), is_eval=is_eval, index=None if index is None else index(i)) as g:
            rewards = {role: float(r) for role, r in fn(g, items[i]).items()}
            outcomes = g.commit(rewards)
            return sum(rewards.values()) / len(rewards), rewards, sum(o.accepted for o in outcomes.values())

    return _run(len(items), attempt, concurrency, retries, "eval groups" if is_eval else "groups", show_progress)
