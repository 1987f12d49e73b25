"""The built-in algorithms' names and registered config defaults, declared without importing torch.

Config validation (`engine.config`, A3R's knobs) needs only these names and defaults, and the processes that
validate configs (the swarm client, job launch, the A3R CLI and workers) never compute: importing the torch
implementations cost them most of their start-up. The registries in `engine.algorithms.registry` answer
names and defaults from these tables and import the implementing module on the first lookup of a function.
A built-in implementation registers against its entry here (the registry rejects one that is missing here or
passes other defaults), so the table and the code cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["BUILTIN_ADVANTAGES", "BUILTIN_POLICY_LOSSES", "BuiltinTable"]


class BuiltinTable:
    """Built-in algorithms of one kind: name -> recommended config defaults, implemented in `module`."""

    def __init__(self, module: str, defaults: Mapping[str, Mapping[str, Any]]) -> None:
        self.module = module
        self.defaults: Mapping[str, Mapping[str, Any]] = MappingProxyType(
            {name: MappingProxyType(dict(d)) for name, d in defaults.items()}
        )


BUILTIN_ADVANTAGES = BuiltinTable(
    "engine.algorithms.advantages",
    {
        "grpo": {},
        "rloo": {"scale_by_std": False},
    },
)

BUILTIN_POLICY_LOSSES = BuiltinTable(
    "engine.algorithms.losses",
    {
        "ppo_clip": {},
        "dapo": {"clip_low": 0.2, "clip_high": 0.28, "agg": "token_mean"},
        "gspo": {"clip_low": 3e-4, "clip_high": 4e-4, "agg": "seq_mean_token_mean"},
        "nll": {"agg": "token_mean"},
    },
)
