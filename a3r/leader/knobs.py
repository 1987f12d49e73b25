"""The catalogue of things a research goal can vary, each mapped once to a `engine.jobs.TrainJob` key.

A *knob* is a studied variable: its human names (aliases the goal parser recognises), the dotted key in
the TrainJob data a blueprint carries (`swarm.pool.batch_size`, `max_tokens`, ...), its type, how to space
a grid over it (log for sizes and rates, linear, or a set of named choices), a default range for goals that
name none, and the settings it needs to mean anything (a LoRA rank needs `swarm.lora.enabled`).

Choice lists come from the engine's own registries and config classes (`policy_loss_names()`,
`task_names()`, built-in models, the `Literal` of `TrainingConfig.merge`), never from a copied list, so a loss
registered tomorrow is a valid value tomorrow. A choice is the exact value the TrainJob field holds (a string,
or a bool for switches such as LoRA on/off), so a run's config reads back as one of the knob's values.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "KNOBS",
    "Knob",
    "find_knob",
    "get_knob",
    "knob_names",
    "phrase_pattern",
    "set_dotted",
    "get_dotted",
    "knob_value",
    "set_knob_value",
]

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


def _literal(config_class: str, field_name: str) -> Callable[[], tuple[str, ...]]:
    """The values of a `Literal` field of an `engine.config` class, read from the class when asked."""

    def read() -> tuple[str, ...]:
        from engine import config

        return typing.get_args(getattr(config, config_class).model_fields[field_name].annotation)

    return read


def _team_methods() -> tuple[str, ...]:
    """The collaboration methods of a pair on one task (independent teams need a multi-role task)."""
    from engine.teams.config import TeamMethod

    return tuple(m.value for m in TeamMethod if m.collab is not None)


# The pair a training-method goal trains when it names none: two SmolLM2-135M agents (a homogeneous pair;
# `--set team.agents=...` gives another, e.g. two models with different tokenizers).
DEFAULT_PAIR = {"first": {"model": {"name": "smollm2-135m"}}, "second": {"model": {"name": "smollm2-135m"}}}


def _switch() -> tuple[bool, ...]:
    return (False, True)


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
    choices: Callable[[], tuple[Any, ...]] | None = None  # valid values of a choice knob
    requires: dict[str, Any] = field(default_factory=dict)  # settings the knob needs (dotted key -> value)
    short: str = ""  # column label in tables and arm labels, e.g. "bs"
    # phrases that name one choice, e.g. "full weights" -> False (LoRA off), "math" -> "arithmetic"
    value_names: dict[str, Any] = field(default_factory=dict)
    # whether a choice's own name alone ("gspo", "task count") identifies this knob; False where the names
    # are everyday words ("off", "token", "text"), which then count only when the knob is named too
    bare_choices: bool = True
    # a value of ANOTHER knob that, compared against one of this knob's choices, stands for one of them:
    # phrase -> (choice, the reason, said aloud as an assumption)
    stands_for: dict[str, tuple[Any, str]] = field(default_factory=dict)
    # when studied, a phrase it reads through `stands_for` means only that: it fixes no other knob's value
    # ("hacpo versus gspo" compares training methods; it does not also pin the policy loss to gspo)
    claims_stand_ins: bool = False
    # the TrainJob fields the knob's value goes to, when it is not the one field `key` names: a symmetric
    # clip ratio is both clip ends at once, so its key is a name of its own and it sets the two fields
    sets: tuple[str, ...] = ()
    # alias -> (the knob whose value a level of this alias is a multiple of, what is said aloud):
    # "episodes per batch" names batch size x group size, so its levels are divided by the group size
    per: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> tuple[str, ...]:
        """The TrainJob fields a blueprint sets to the knob's value (and reads it back from)."""
        return self.sets or (self.key,)

    def valid_choices(self) -> tuple[Any, ...]:
        return self.choices() if self.choices else ()

    def value_phrases(self, named: bool) -> list[tuple[str, Any]]:
        """(phrase, choice) pairs naming a choice in a sentence; `named`: the knob itself is named there."""
        pairs = list(self.value_names.items())
        if self.bare_choices or named:
            pairs += [(c.replace("_", " "), c) for c in self.valid_choices() if isinstance(c, str)]
        return pairs

    def coerce(self, value: Any) -> Any:
        """A parsed value as this knob's type; raises ValueError with the reason."""
        if self.kind == "choice":
            return self._choice(value)
        x = float(value)
        if self.minimum is not None and x < self.minimum:
            raise ValueError(f"{self.name} must be >= {self.minimum:g}, got {x:g}")
        if self.kind == "int":
            if not x.is_integer():
                raise ValueError(f"{self.name} must be a whole number, got {x:g}")
            return int(x)
        return x

    def _choice(self, value: Any) -> Any:
        valid = self.valid_choices()
        if isinstance(value, str):
            phrase = " ".join(value.strip().lower().replace("_", " ").split())
            # a choice by its own name ("ppo clip", "true") or by one of its phrases ("full weights")
            by_phrase = {str(c).lower().replace("_", " "): c for c in valid} | self.value_names
            value = by_phrase.get(phrase, phrase.replace(" ", "_"))
        if value in valid:
            return next(c for c in valid if c == value)  # the choice itself: True, not 1
        if self.key == "swarm.model.name":  # a local model directory or .gguf file is a model too
            return value
        raise ValueError(f"{value!r} is not a valid {self.name}; valid: {', '.join(map(str, valid))}")


_LORA = {"swarm.lora.enabled": True}

# Names of the episodes in a batch: the batch size times the group size, so they map to batch size per group.
_EPISODES_PER_BATCH = (
    "episodes per batch",
    "episodes per step",
    "rollouts per batch",
    "rollouts per step",
    "samples per batch",
    "samples per step",
)

KNOBS: tuple[Knob, ...] = (
    Knob(
        "batch size",
        "swarm.pool.batch_size",
        "int",
        "log",
        short="bs",
        default_range=(1, 64),
        minimum=1,
        aliases=(
            "train batch size",
            "batch size",
            "batchsize",
            "bs",
            "tasks per step",
            "tasks per batch",
            "prompts per step",
            "prompts per batch",
            "questions per step",
            "questions per batch",
            *_EPISODES_PER_BATCH,
        ),
        # a batch holds batch size x group size episodes (engine.pool: B tasks, N episodes each)
        per={alias: "swarm.pool.group_size" for alias in _EPISODES_PER_BATCH},
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
            "episodes per prompt",
            "completions per prompt",
            "generations per prompt",
            "responses per prompt",
            "samples per task",
            "rollouts per prompt",
            "grpo group size",
            "group sizes",
            "groupsize",
            "num generations",
            "number of generations",
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
        aliases=("learning rate", "learning rates", "learning-rate", "lr", "step size"),
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
            "max new tokens",
            "max completion tokens",
            "max completion length",
            "completion length",
            "token budget",
            "token limit",
            "max length",
            "response budget",
            "maxtokens",
            "tokens",  # a unit after numbers: "with 16 and 64 tokens" are levels of max tokens
            "max token",
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
        aliases=("lora rank", "adapter rank", "lora r", "lora ranks", "rank"),
        requires=_LORA,
    ),
    Knob(
        "LoRA alpha",
        "swarm.lora.alpha",
        "int",
        "log",
        short="alpha",
        default_range=(8, 64),
        minimum=1,
        aliases=("lora alpha", "adapter alpha", "lora scaling"),
        requires=_LORA,
    ),
    Knob(
        "LoRA dropout",
        "swarm.lora.dropout",
        "float",
        "linear",
        short="drop",
        default_range=(0.0, 0.2),
        minimum=0,
        aliases=("lora dropout", "adapter dropout"),
        requires=_LORA,
    ),
    # LoRA versus full weights: the engine trains an adapter exactly when swarm.lora.enabled is true
    Knob(
        "LoRA",
        "swarm.lora.enabled",
        "choice",
        "choice",
        short="lora",
        choices=_switch,
        aliases=("training mode", "fine tuning mode", "finetuning mode", "lora"),
        value_names={
            "lora": True,
            "lora adapter": True,
            "without lora": False,
            "no lora": False,
            "full weights": False,
            "full weight": False,
            "full fine tuning": False,
            "full finetuning": False,
            "full parameters": False,
            "full parameter": False,
        },
    ),
    Knob(
        "PPO epochs",
        "swarm.training.ppo_epochs",
        "int",
        "linear",
        short="ep",
        default_range=(1, 4),
        minimum=1,
        aliases=("ppo epochs", "epochs per batch", "ppo epoch", "passes per batch", "updates per batch"),
    ),
    Knob(
        "mini-batch size",
        "swarm.training.mini_batch_size",
        "int",
        "log",
        short="mb",
        default_range=(4, 64),  # not below training.micro_batch_size (4 by default)
        minimum=1,
        aliases=("mini batch size", "minibatch size", "optimizer batch size", "mini batch", "minibatch"),
    ),
    Knob(
        "weight decay",
        "swarm.training.weight_decay",
        "float",
        "log",
        short="wd",
        default_range=(1e-3, 1e-1),
        minimum=0,
        aliases=("weight decay", "wd"),
    ),
    Knob(
        "max grad norm",
        "swarm.training.max_grad_norm",
        "float",
        "log",
        short="gn",
        default_range=(0.1, 10.0),
        minimum=0,
        aliases=("max grad norm", "max gradient norm", "gradient clipping", "grad norm clip", "grad clip"),
    ),
    Knob(
        "sampling temperature",
        "temperature",
        "float",
        "linear",
        short="T",
        default_range=(0.5, 1.5),
        minimum=0,
        aliases=("sampling temperature", "temperature", "temperatures", "temp"),
    ),
    Knob(
        "policy loss",
        "swarm.algorithm.policy_loss",
        "choice",
        "choice",
        short="loss",
        choices=_policy_losses,
        aliases=("policy loss", "loss function", "loss"),
        value_names={"ppo": "ppo_clip"},
        stands_for={
            "grpo": (
                "ppo_clip",
                "GRPO is the grpo advantage with the token-level ppo_clip loss, and the other losses here "
                "use the grpo advantage too, so GRPO against another loss is the ppo_clip loss",
            )
        },
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
        "advantage std scaling",
        "swarm.algorithm.scale_by_std",
        "choice",
        "choice",
        short="std",
        choices=_switch,
        aliases=(
            "advantage std scaling",
            "std scaling",
            "scale by std",
            "std normalisation",
            "std normalization",
        ),
        value_names={"dr grpo": False, "dr. grpo": False, "dr.grpo": False},
        stands_for={
            "grpo": (True, "GRPO divides the advantages by the group's reward std and Dr. GRPO does not")
        },
    ),
    Knob(
        "loss aggregation",
        "swarm.algorithm.agg",
        "choice",
        "choice",
        short="agg",
        choices=_literal("AlgorithmConfig", "agg"),
        aliases=("loss aggregation", "token aggregation", "aggregation"),
    ),
    Knob(
        "lower clip ratio",
        "swarm.algorithm.clip_low",
        "float",
        "linear",
        short="clo",
        default_range=(0.1, 0.3),
        minimum=0,
        aliases=("lower clip ratio", "clip ratio low", "lower clip", "clip low", "low clip ratio", "clip low ratio"),
    ),
    Knob(
        "upper clip ratio",
        "swarm.algorithm.clip_high",
        "float",
        "linear",
        short="chi",
        default_range=(0.2, 0.4),
        minimum=0,
        aliases=(
            "upper clip ratio",
            "clip ratio high",
            "upper clip",
            "clip high",
            "clip higher",
            "high clip ratio",
            "clip high ratio",
            "clip-higher ratio",
        ),
    ),
    # PPO's epsilon as one number: the ratio is clipped to [1 - eps, 1 + eps], both ends at once
    Knob(
        "clip ratio",
        "swarm.algorithm.clip",
        "float",
        "linear",
        short="clip",
        default_range=(0.1, 0.3),
        minimum=0,
        aliases=(
            "clip ratio",
            "clipping ratio",
            "clip ratios",
            "clip range",
            "clip epsilon",
            "clipping epsilon",
            "ppo clip ratio",
            "ppo clip range",
            "ppo clip epsilon",
            "ppo epsilon",
            "clip eps",
            "epsilon",
        ),
        sets=("swarm.algorithm.clip_low", "swarm.algorithm.clip_high"),
    ),
    Knob(
        "KL coefficient",
        "swarm.algorithm.kl_coef",
        "float",
        "log",
        short="kl",
        default_range=(1e-3, 1e-1),
        minimum=0,
        aliases=(
            "kl coefficient",
            "kl coef",
            "kl penalty",
            "kl weight",
            "kl beta",
            "kl divergence penalty",
            "kl regularisation",
            "kl regularization",
            "kl term",
            "beta",
            "kl",
        ),
    ),
    Knob(
        "entropy coefficient",
        "swarm.algorithm.entropy_coef",
        "float",
        "log",
        short="ent",
        default_range=(1e-4, 1e-2),
        minimum=0,
        aliases=("entropy coefficient", "entropy coef", "entropy bonus", "entropy weight"),
    ),
    Knob(
        "merge mode",
        "swarm.training.merge",
        "choice",
        "choice",
        short="merge",
        choices=_literal("TrainingConfig", "merge"),
        aliases=(
            "timeline merging mode",
            "timeline merge mode",
            "timeline merging",
            "merge mode",
            "merging mode",
            "merge modes",
            "merging modes",
            "timeline merge",
            "merging",
            "merge",
        ),
        # "however phrased": the mode word before or after the merging word, with level/mode/based
        value_names={
            **{
                phrase: mode
                for mode in ("token", "text")
                for phrase in (
                    f"{mode} merging",
                    f"{mode} merge",
                    f"{mode} level merging",
                    f"{mode} level merge",
                    f"{mode} mode merging",
                    f"{mode} mode merge",
                    f"{mode} based merging",
                    f"{mode} based merge",
                    f"{mode} mode",
                    f"{mode} level",
                    f"merging by {mode}",
                    f"merging by {mode}s",
                    f"merge by {mode}",
                    f"merge by {mode}s",
                    f"merging on {mode}s",
                    f"merging at the {mode} level",
                    f"{mode} merged",
                    f"{mode} timeline merging",
                    f"{mode} mode timeline merging",
                )
            },
            "no merging": "off",
            "without merging": "off",
            "merging off": "off",
            "merging disabled": "off",
            "no timeline merging": "off",
            "without timeline merging": "off",
            "unmerged": "off",
            "merge off": "off",
        },
        bare_choices=False,
    ),
    Knob(
        "pool policy",
        "swarm.pool.policy",
        "choice",
        "choice",
        short="pool",
        choices=_literal("PoolConfig", "policy"),
        aliases=("pool trigger policy", "pool policy", "pool trigger", "trigger policy", "batching policy"),
        # DAPO's dynamic sampling keeps sampling until B groups have non-equal rewards
        value_names={"dynamic sampling": "nondegenerate_task_count"},
    ),
    # the run's length: every arm still evaluates at step 0 and at its own last step
    Knob(
        "training steps",
        "swarm.training.max_steps",
        "int",
        "log",
        short="steps",
        default_range=(5, 40),
        minimum=1,
        aliases=(
            "training steps",
            "total training steps",
            "number of training steps",
            "number of steps",
            "optimizer steps",
            "optimiser steps",
            "train steps",
            "training length",
            "max steps",
            "step count",
            "training iterations",
            "steps",  # a unit after numbers: "at 8 and 32 steps" are levels of the training steps
        ),
    ),
    Knob(
        "model",
        "swarm.model.name",
        "choice",
        "choice",
        short="model",
        choices=_models,
        aliases=("base model", "model"),
        value_names={
            "smollm2 135m": "smollm2-135m",
            "smollm2": "smollm2-135m",
            "smollm": "smollm2-135m",
            "tiny model": "tiny",
            "model tiny": "tiny",
        },
        bare_choices=False,  # "tiny" is an everyday word
    ),
    # how several models train together (engine.teams): HACPO against its baselines
    Knob(
        "training method",
        "team.method",
        "choice",
        "choice",
        short="method",
        choices=_team_methods,
        aliases=("multi agent training method", "collaboration method", "team method", "training method"),
        value_names={"hacpo": "hacpo", "gspox2": "gspox2", "gspo x2": "gspox2", "naive sharing": "naive"},
        bare_choices=False,  # "gspo" is first a policy loss; "independent", "naive" are everyday words
        requires={"team.agents": DEFAULT_PAIR},
        claims_stand_ins=True,
        stands_for={
            "gspo": (
                "gspo",
                "compared with HACPO, GSPO is the team whose agents train on their own samples only",
            )
        },
    ),
    Knob(
        "task",
        "task",
        "choice",
        "choice",
        short="task",
        choices=_tasks,
        aliases=("task",),
        value_names={
            "math": "arithmetic",
            "maths": "arithmetic",
            "sums": "arithmetic",
            "addition": "arithmetic",
            "aime": "arithmetic",
            "tool use": "calculator",
            "tool using": "calculator",
        },
    ),
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


def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """A lower-case phrase as a whole-word pattern; its spaces match spaces, underscores or hyphens."""
    return re.compile(r"(?<![\w-])" + re.escape(phrase).replace(r"\ ", r"[\s_-]+") + r"(?![\w-])")


def _alias_patterns() -> list[tuple[re.Pattern[str], Knob]]:
    # longest alias first, so "max response length" wins over "response length" and "lora rank" over "rank"
    pairs = [(a, k) for k in KNOBS for a in k.aliases]
    pairs.sort(key=lambda p: -len(p[0]))
    # a plural names the knob too: "at batch sizes 4 and 8", "learning rates 1e-5 and 1e-4"
    return [
        (re.compile(phrase_pattern(a).pattern.replace(r"(?![\w-])", r"s?(?![\w-])")), k) for a, k in pairs
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


def set_knob_value(data: dict[str, Any], key_or_name: str, value: Any) -> None:
    """Set a knob's value in TrainJob data: every field it stands for (both ends of a clip ratio)."""
    for f in get_knob(key_or_name).fields:
        set_dotted(data, f, value)


def knob_value(data: dict[str, Any], key_or_name: str, default: Any = None) -> Any:
    """A knob's value read back from TrainJob data (its first field)."""
    return get_dotted(data, get_knob(key_or_name).fields[0], default)
