"""Pool trigger policies as pure functions of the pool's contents.

Each policy answers "is there a batch?" and "which episodes form it?" from `task groups` (task id ->
finished episodes in arrival order). B = `batch_size`, N = `group_size`:
- episode_count: B*N finished episodes, whatever their tasks (oldest first).
- task_count: B tasks with at least N episodes each (each task contributes its first N).
- nondegenerate_task_count: like task_count but a task counts only if its N rewards are not all equal
  (DAPO dynamic sampling: a uniform group has zero advantage and carries no gradient). Degenerate
  complete groups are dropped from the pool so they cannot block it.
- all_clients_agree / any_client_agrees: the clients decide; the batch is everything in the pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.types import EpisodeResult


@dataclass(frozen=True)
class Selection:
    """The outcome of a policy: the episodes to train on and the ones to discard (never both)."""

    batch: list[EpisodeResult]
    discard: list[EpisodeResult]


def _is_degenerate(episodes: Sequence[EpisodeResult]) -> bool:
    return len({e.reward for e in episodes}) <= 1


def select_batch(
    policy: str,
    groups: Mapping[str, Sequence[EpisodeResult]],
    batch_size: int,
    group_size: int,
    active_clients: frozenset[str] = frozenset(),
    agreeing_clients: frozenset[str] = frozenset(),
) -> Selection | None:
    """Return the batch the policy fires on, or None if it does not fire yet."""
    if policy == "episode_count":
        everything = sorted((e for g in groups.values() for e in g), key=_arrival)
        if len(everything) < batch_size * group_size:
            return None
        return Selection(everything[: batch_size * group_size], [])
    if policy in ("task_count", "nondegenerate_task_count"):
        complete = [(t, list(g[:group_size])) for t, g in groups.items() if len(g) >= group_size]
        discard: list[EpisodeResult] = []
        if policy == "nondegenerate_task_count":
            discard = [e for _, g in complete if _is_degenerate(g) for e in g]
            complete = [(t, g) for t, g in complete if not _is_degenerate(g)]
        if len(complete) < batch_size:
            return Selection([], discard) if discard else None
        complete.sort(key=lambda tg: _arrival(tg[1][-1]))
        return Selection([e for _, g in complete[:batch_size] for e in g], discard)
    if policy in ("all_clients_agree", "any_client_agrees"):
        everything = sorted((e for g in groups.values() for e in g), key=_arrival)
        if not everything or not agreeing_clients:
            return None
        if policy == "all_clients_agree" and not active_clients <= agreeing_clients:
            return None
        return Selection(everything, [])
    raise ValueError(f"unknown pool policy {policy!r}")


def _arrival(e: EpisodeResult) -> int:
    return e.seq
