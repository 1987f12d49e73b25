"""The catalogue of things a research goal can vary, each mapped once to a `engine.jobs.TrainJob` key.

A *knob* is a studied variable: its human names (aliases the goal parser recognises), the dotted key in
the TrainJob data a blueprint carries (`swarm.pool.batch_size`, `max_tokens`, ...), its type, how to space
a grid over it (log for sizes and rates, linear, or a set of named choices), a default range for goals that
name none, and the settings it needs to mean anything (a LoRA rank needs `swarm.lora.enabled`).

Choice lists come from the engine's own registries (`policy_loss_names()`, `task_names()`, built-in
models), never from a copied list, so a loss registered tomorrow is a valid value tomorrow.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["KNOBS", "Knob", "find_knob", "get_knob", "knob_names", "set_dotted", "get_dotted"]

Scale = Literal["log", "linear", "choice"]


def _policy_losses() -> tuple[str, ...]:
    from engine.algorithms import policy_loss_names

    return tuple(policy_loss_names())


def _advantages() -> tuple[str, ...]:
    from engine.algorithms import advantage_names

    return tuple(advantage_names())


def _tasks() -> tuple[str, ...]:
    from engine.tasks import task_names

    return tuple(task_names())


def _models() -> tuple[str, ...]:
    from engine.models import BUILTINS

    return tuple(BUILTINS)


@dataclass(frozen=True)
class Knob:
    """One variable a campaign can study."""

    name: str  # canonical human name, e.g. "batch size"
    key: str  # dotted key in TrainJob data, e.g. "swarm.pool.batch_size"
    kind: Literal["int", "float", "choice"]
    scale: Scale
    aliases: tuple[str, ...]  # lower-case phrases, underscores written as spaces
    default_range: tuple[float, float] | None = None  # used when a goal names no range
    minimum: float | None = None  # validity bound of the engine field (inclusive)
    choices: Callable[[], tuple[str, ...]] | None = None  # valid values of a choice knob
    requires: dict[str, Any] = field(default_factory=dict)  # settings the knob needs (dotted key -> value)
    short: str = ""  # column label in tables and arm labels, e.g. "bs"

    def valid_choices(self) -> tuple[str, ...]:
        return self.choices() if self.choices else ()

    def coerce(self, value: Any) -> Any:
        """A parsed value as this knob's type; raises ValueError with the reason."""
        if self.kind == "choice":
            v = str(value).strip().lower().replace(" ", "_")
            valid = self.valid_choices()
            if self.key != "swarm.model.name" and v not in valid:
                raise ValueError(f"{v!r} is not a valid {self.name}; valid: {', '.join(valid)}")
            return v
        x = float(value)
        if self.minimum is not None and x < self.minimum:
            raise ValueError(f"{self.name} must be >= {self.minimum:g}, got {x:g}")
        if self.kind == "int":
            if not x.is_integer():
                raise ValueError(f"{self.name} must be a whole number, got {x:g}")
            return int(x)
        return x


KNOBS: tuple[Knob, ...] = (
    Knob(
        "batch size",
        "swarm.pool.batch_size",
        "int",
        "log",
        short="bs",
        default_range=(1, 64),
        minimum=1,
        aliases=("train batch size", "batch size", "batchsize", "bs"),
    ),
    Knob(
        "group size",
        "swarm.pool.group_size",
        "int",
        "log",
        short="G",
        default_range=(2, 16),
        minimum=1,
        aliases=(
            "group size",
            "rollouts per task",
            "samples per prompt",
            "episodes per task",
            "grpo group size",
        ),
    ),
    Knob(
        "learning rate",
        "swarm.training.lr",
        "float",
        "log",
        short="lr",
        default_range=(1e-6, 1e-4),
        minimum=0,
        aliases=("learning rate", "lr", "step size"),
    ),
    Knob(
        "max response length",
        "max_tokens",
        "int",
        "log",
        short="mt",
        default_range=(16, 128),
        minimum=1,
        aliases=(
            "max response length in one turn",
            "maximum response length",
            "max response length",
            "response length",
            "max tokens",
            "max new tokens",
            "reply budget",
            "generation length",
        ),
    ),
    Knob(
        "LoRA rank",
        "swarm.lora.rank",
        "int",
        "log",
        short="r",
        default_range=(2, 64),
        minimum=1,
        aliases=("lora rank", "adapter rank"),
        requires={"swarm.lora.enabled": True},
    ),
    Knob(
        "PPO epochs",
        "swarm.training.ppo_epochs",
        "int",
        "linear",
        short="ep",
        default_range=(1, 4),
        minimum=1,
        aliases=("ppo epochs", "epochs per batch"),
    ),
    Knob(
        "sampling temperature",
        "temperature",
        "float",
        "linear",
        short="T",
        default_range=(0.5, 1.5),
        minimum=0,
        aliases=("sampling temperature", "temperature"),
    ),
    Knob(
        "policy loss",
        "swarm.algorithm.policy_loss",
        "choice",
        "choice",
        short="loss",
        choices=_policy_losses,
        aliases=("policy loss", "loss function", "loss"),
    ),
    Knob(
        "advantage estimator",
        "swarm.algorithm.advantage",
        "choice",
        "choice",
        short="adv",
        choices=_advantages,
        aliases=("advantage estimator", "advantage"),
    ),
    Knob(
        "model",
        "swarm.model.name",
        "choice",
        "choice",
        short="model",
        choices=_models,
        aliases=("base model", "model"),
    ),
    Knob("task", "task", "choice", "choice", short="task", choices=_tasks, aliases=("task",)),
)


def knob_names() -> list[str]:
    return [k.name for k in KNOBS]


def get_knob(key_or_name: str) -> Knob:
    """A knob by dotted key, canonical name or alias; the error lists every known knob."""
    q = key_or_name.strip().lower().replace("_", " ")
    for k in KNOBS:
        if key_or_name == k.key or q == k.name.lower() or q in k.aliases:
            return k
    raise KeyError(
        f"unknown variable {key_or_name!r}; known: {', '.join(f'{k.name} ({k.key})' for k in KNOBS)}"
    )


def _alias_patterns() -> list[tuple[re.Pattern[str], Knob]]:
    # longest alias first, so "max response length" wins over "response length" and "lora rank" over "rank"
    pairs = [(a, k) for k in KNOBS for a in k.aliases]
    pairs.sort(key=lambda p: -len(p[0]))
    return [
        (re.compile(r"(?<![\w-])" + re.escape(a).replace(r"\ ", r"[\s_-]+") + r"(?![\w-])"), k)
        for a, k in pairs
    ]


_PATTERNS = _alias_patterns()


def find_knob(text: str) -> list[tuple[int, int, Knob]]:
    """Every knob mention in `text` as (start, end, knob), in order, without overlaps."""
    taken: list[tuple[int, int, Knob]] = []
    for pat, knob in _PATTERNS:
        for m in pat.finditer(text):
            if not any(m.start() < e and s < m.end() for s, e, _ in taken):
                taken.append((m.start(), m.end(), knob))
    return sorted(taken, key=lambda t: t[0])


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts, creating the intermediate dicts."""
    *parents, leaf = key.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def get_dotted(data: dict[str, Any], key: str, default: Any = None) -> Any:
    node: Any = data
    for p in key.split("."):
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node
