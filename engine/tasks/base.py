"""The task interface and registry.

A task is data plus an agent: `dataset(n, seed)` makes items; `run(client, item, sampling)` plays one
episode through any OpenAI client (the swarm server is just a base_url) and returns the rule reward.
"""

from __future__ import annotations

import re
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


def _registry() -> dict[str, Task]:
    from engine.tasks.arithmetic import Arithmetic
    from engine.tasks.calculator import CalculatorAgent
    from engine.tasks.countdown import Countdown

    return {t.name: t for t in (Arithmetic(), Countdown(), CalculatorAgent())}


def task_names() -> tuple[str, ...]:
    return tuple(sorted(_registry()))


def get_task(name: str) -> Task:
    tasks = _registry()
    if name not in tasks:
        raise ConfigError(f"unknown task {name!r}; built-in tasks: {', '.join(sorted(tasks))}")
    return tasks[name]
