"""The task interface and registry.

A task is data plus an agent: `dataset(n, seed)` makes items; `run(client, item, sampling)` plays one
episode through any OpenAI client (the swarm server is just a base_url) and returns the rule reward.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.errors import ConfigError


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str
    answer: Any
    extra: dict[str, Any] = field(default_factory=dict)


class Task(Protocol):
    """One agent plays the task. Multi-model tasks also have `roles` and `run_roles(llms, item, sampling)`
    (role -> (client, model) in, role -> reward out): each role may then be its own model and server.
    A multi-role task with `episodes_per_role = True` (a game whose sides would score the same in one
    episode) has no `run`: one model plays it as one episode per role (engine.jobs.run_items)."""

    name: str

    def dataset(self, n: int, seed: int) -> list[Item]: ...

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        """Play one episode with `llm` (an openai.OpenAI client) and return its reward."""
        ...


_INT = re.compile(r"-?\d+")


def last_integer(text: str | None) -> int | None:
    """The last integer in a reply. Models often restate the question ("3 + 4 = 7"), so never the first."""
    found = _INT.findall((text or "").replace(",", ""))
    return int(found[-1]) if found else None


# Every run of every arm and seed is scored on the same held-out problems (drawn from this seed), so
# scores compare across a sweep; training data of any seed never contains one of them.
HELD_OUT_SEED = 10_000


def distinct_items(task: Task, n: int, seed: int, exclude: Collection[str] = ()) -> list[Item]:
    """The first `n` distinct items of the `seed` stream whose ids are not in `exclude` (a held-out set,
    a validation split: any stream a caller keeps apart). A prefix of the stream, so a larger `n` extends
    a smaller one's list."""
    found: dict[str, Item] = {}
    m = max(n, 1)
    while len(found) < n:
        for it in task.dataset(m, seed):
            if it.id not in exclude:
                found.setdefault(it.id, it)
            if len(found) == n:
                break
        if len(found) < n and m > 64 * n + 1024:
            where = " outside the excluded ones" if exclude else ""
            raise ConfigError(f"task {task.name!r} has fewer than {n} distinct problems{where}")
        m *= 2
    return list(found.values())


def split_items(
    task: Task, n_train: int, n_eval: int, seed: int, eval_seed: int = HELD_OUT_SEED
) -> tuple[list[Item], list[Item]]:
    """(training items, held-out items): `n_eval` distinct held-out items drawn from `eval_seed`, and the
    first `n_train` items of the `seed` stream that are not among them.

    The training list is a prefix of the seed's stream with held-out problems skipped, so a resumed job
    draws exactly the same problems, and it is unchanged for `n_eval = 0`.
    """
    held = {it.id: it for it in distinct_items(task, n_eval, eval_seed)}
    m = max(n_train, 1)
    while True:
        train = [it for it in task.dataset(m, seed) if it.id not in held][:n_train]
        if len(train) == n_train:
            return train, list(held.values())
        if m > 64 * n_train + 1024:
            raise ConfigError(
                f"task {task.name!r} cannot supply {n_train} training problems outside its held-out set"
            )
        m *= 2
