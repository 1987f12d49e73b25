"""Pure torch algorithm functions shared by every backend: advantage estimators and policy losses in
typed registries (`registry`), their configs (`config`), and HACPO's dedicated API (`hacpo`).

Built-ins: advantages grpo, rloo; policy losses ppo_clip, dapo, gspo, nll (declared in `builtins`).

Importing this package does not import torch: the registries, configs and errors are torch-free and load
eagerly; the torch functions (losses, advantages, HACPO) load on first attribute access (PEP 562), so a
process that only validates configs (the swarm client, job launch, A3R's CLI) starts without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from engine.algorithms.config import AdvantageConfig, HacpoConfig, LossConfig
from engine.algorithms.errors import AlgorithmError, DuplicateAlgorithm, SignatureMismatch, UnknownName
from engine.algorithms.registry import (
    AdvantageEstimator,
    PolicyLoss,
    Registry,
    advantage_defaults,
    advantage_names,
    estimator_config,
    get_advantage_estimator,
    get_policy_loss,
    policy_loss_config,
    policy_loss_defaults,
    policy_loss_names,
    register_advantage,
    register_policy_loss,
)

# Torch-importing names -> their module, imported on first access.
_LAZY = {
    "GroupIds": "engine.algorithms._groups",
    **dict.fromkeys(("grpo_advantages", "rloo_advantages"), "engine.algorithms.advantages"),
    **dict.fromkeys(
        (
            "CapabilityTracker",
            "HacpoAdvantages",
            "capability_ratio",
            "capability_weights",
            "cross_lower_bound",
            "hacpo_advantages",
            "hacpo_loss",
            "hacpo_omega",
            "step_accuracy",
        ),
        "engine.algorithms.hacpo",
    ),
    **dict.fromkeys(
        (
            "aggregate",
            "dapo_loss",
            "entropy_from_logits",
            "gspo_loss",
            "kl_penalty",
            "masked_mean",
            "nll_loss",
            "ppo_clip_loss",
            "token_logprobs",
        ),
        "engine.algorithms.losses",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "estimator_config",
    "policy_loss_config",
    "AdvantageConfig",
    "AdvantageEstimator",
    "AlgorithmError",
    "CapabilityTracker",
    "DuplicateAlgorithm",
    "GroupIds",
    "HacpoAdvantages",
    "HacpoConfig",
    "LossConfig",
    "PolicyLoss",
    "Registry",
    "SignatureMismatch",
    "UnknownName",
    "advantage_defaults",
    "advantage_names",
    "aggregate",
    "capability_ratio",
    "capability_weights",
    "cross_lower_bound",
    "dapo_loss",
    "entropy_from_logits",
    "get_advantage_estimator",
    "get_policy_loss",
    "grpo_advantages",
    "gspo_loss",
    "hacpo_advantages",
    "hacpo_loss",
    "hacpo_omega",
    "kl_penalty",
    "masked_mean",
    "nll_loss",
    "policy_loss_defaults",
    "policy_loss_names",
    "ppo_clip_loss",
    "register_advantage",
    "register_policy_loss",
    "rloo_advantages",
    "step_accuracy",
    "token_logprobs",
]
