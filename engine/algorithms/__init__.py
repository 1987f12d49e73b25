"""Pure torch algorithm functions shared by every backend: advantage estimators and policy losses in
typed registries (`registry`), their configs (`config`), and HACPO's dedicated API (`hacpo`).

Importing this package registers the built-ins: advantages grpo, rloo; policy losses ppo_clip, dapo, gspo, nll.
"""

from engine.algorithms.advantages import grpo_advantages, rloo_advantages
from engine.algorithms.config import AdvantageConfig, HacpoConfig, LossConfig
from engine.algorithms.errors import AlgorithmError, DuplicateAlgorithm, SignatureMismatch, UnknownName
from engine.algorithms.hacpo import (
    CapabilityTracker,
    HacpoAdvantages,
    capability_ratio,
    capability_weights,
    cross_lower_bound,
    hacpo_advantages,
    hacpo_loss,
    hacpo_omega,
    step_accuracy,
)
from engine.algorithms.losses import (
    aggregate,
    dapo_loss,
    entropy_from_logits,
    gspo_loss,
    kl_penalty,
    masked_mean,
    nll_loss,
    ppo_clip_loss,
    token_logprobs,
)
from engine.algorithms.registry import (
    AdvantageEstimator,
    GroupIds,
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
