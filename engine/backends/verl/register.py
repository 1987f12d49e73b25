"""The project's advantage estimators and policy losses, registered into verl's registries.

Importing this module registers every name of `engine.algorithms` under a `swarm_` prefix
(`swarm_grpo`, `swarm_rloo`, `swarm_ppo_clip`, `swarm_gspo`, ...): verl already owns `grpo`, `rloo` and
`gspo` with its own implementations (and its trainer special-cases `grpo`), so the prefix keeps both
usable and makes a config say which one it means. verl's registries are module globals of each process,
so this module must be imported in every Ray worker, not only the driver: the verl config translation
names it as `actor_rollout_ref.model.external_lib` (verl imports that in each worker's model config), and
the package's `verl.plugins` entry point loads it wherever verl is imported.

Adapters, verl's call -> the project's function:
- Policy loss. verl calls `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
  rollout_is_weights)` with (B, R) response tensors. The project's losses take one advantage per sequence
  and per-sample weights: both are read back from the (B, R) tensors, where the DataProto conversion
  (`engine.backends.verl.dataproto`) broadcast them over each row's trainable tokens (`advantages`,
  `rollout_is_weights`). A row whose values differ across its tokens (verl's GAE, verl's own token-level
  IS weights) is refused with a message instead of silently averaged. Clip bounds come from the actor
  config (`clip_ratio_low/high`), the aggregation from `loss_agg_mode`. KL and entropy are left to verl,
  which adds them after the policy loss (`use_kl_loss`, `entropy_coeff`), so they are 0 here.
- Across micro-batches and data-parallel ranks verl normalises by global counts (`global_batch_info`);
  the adapter rescales the project's micro-batch loss (normalised by its own weighted count) by this
  micro-batch's share of the global unweighted count. With all weights equal that is exactly verl's
  aggregation; with unequal weights it is exact when each micro-batch has the global ratio of weighted to
  unweighted count, and otherwise differs from the one-batch loss by that ratio per micro-batch.
- Advantage estimator. verl calls `fn(token_level_rewards, response_mask, config, index, ...)`: the reward
  is the row sum, the groups are `index` (verl's `uid`, our task ids), `scale_by_std` is the algorithm
  config's `norm_adv_by_std_in_grpo`; the advantage is broadcast over the response mask, as verl's are.

HACPO is not registered (as in engine.algorithms): its loss needs inputs verl's signature cannot carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from engine.algorithms import (
    LossConfig,
    advantage_names,
    estimator_config,
    get_advantage_estimator,
    get_policy_loss,
    policy_loss_names,
)
from engine.backends.verl.names import AGG_FROM_VERL, AGG_TO_VERL, PREFIX, verl_name

__all__ = [
    "AGG_FROM_VERL",
    "AGG_TO_VERL",
    "PREFIX",
    "per_sequence",
    "register_with_verl",
    "verl_advantage_estimator",
    "verl_name",
    "verl_policy_loss",
]


def _get(config: Any, key: str, default: Any = None) -> Any:
    """A field of a verl config, whether a dataclass (ActorConfig, AlgoConfig), a DictConfig or a dict."""
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(key, default)
    getter = getattr(config, "get", None)
    if getter is not None:
        try:
            return getter(key, default)
        except (AttributeError, KeyError, TypeError):
            pass
    return getattr(config, key, default)


def per_sequence(x_BT: torch.Tensor, mask_BT: torch.Tensor, fill: float, what: str) -> torch.Tensor:
    """The one value each row carries on its masked tokens, (B,); `fill` for rows without any.

    Raises ValueError when a row's masked values differ: the project's losses take one value per sequence.
    """
    keep_BT = mask_BT.bool()
    hi_B = torch.where(keep_BT, x_BT, -torch.inf).amax(-1)
    lo_B = torch.where(keep_BT, x_BT, torch.inf).amin(-1)
    has_B = keep_BT.any(-1)
    if bool((has_B & (hi_B != lo_B)).any()):
        raise ValueError(
            f"swarm losses take one {what} per sequence, but a row's {what} differ across its tokens "
            f"(token-level {what} from verl, e.g. adv_estimator gae or rollout correction IS weights); "
            "use a swarm_* advantage estimator and leave algorithm.rollout_correction off"
        )
    return torch.where(has_B, hi_B, torch.full_like(hi_B, fill)).to(x_BT.dtype)


def _global_share(mask_BT: torch.Tensor, config: Any, agg: str) -> float:
    """This micro-batch's share of verl's global (all ranks, whole mini-batch) count, times dp_size; 1
    when verl gives no global counts (a single direct call)."""
    info = _get(config, "global_batch_info", None) or {}
    dp = int(info.get("dp_size") or 1)
    if agg == "token_mean":
        total = info.get("batch_num_tokens")
        local = mask_BT.sum()
    else:
        total = info.get("global_batch_size")
        local = (mask_BT.sum(-1) > 0).sum()
    if total is None:
        return 1.0
    return float(local) * dp / max(float(total), 1.0)


def verl_policy_loss(name: str) -> Callable[..., tuple[torch.Tensor, dict[str, Any]]]:
    """The project's policy loss `name`, with verl's policy-loss signature (see the module docstring)."""
    fn = get_policy_loss(name)

    def loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        agg = AGG_FROM_VERL.get(loss_agg_mode)
        if agg is None:
            raise ValueError(
                f"loss_agg_mode {loss_agg_mode!r} has no swarm counterpart; use one of {', '.join(AGG_FROM_VERL)}"
            )
        mask_BT = response_mask.to(log_prob.dtype)
        clip = _get(config, "clip_ratio", 0.2)
        low = _get(config, "clip_ratio_low", None)
        high = _get(config, "clip_ratio_high", None)
        norm = None
        if agg == "seq_mean_token_sum_norm":
            norm = int(_get(config, "loss_scale_factor", None) or response_mask.shape[-1])
        cfg = LossConfig(
            clip_low=clip if low is None else low,
            clip_high=clip if high is None else high,
            agg=agg,
            max_seq_len_norm=norm,
        )
        adv_B = per_sequence(advantages, response_mask, 0.0, "advantages").to(log_prob.dtype)
        if rollout_is_weights is None:
            w_B = torch.ones(log_prob.shape[0], dtype=log_prob.dtype, device=log_prob.device)
        else:
            w_B = per_sequence(rollout_is_weights, response_mask, 1.0, "sample weights").to(log_prob.dtype)
        value, metrics = fn(
            logp_BT=log_prob, old_logp_BT=old_log_prob, advantages_B=adv_B, mask_BT=mask_BT, weights_B=w_B, cfg=cfg
        )
        value = value * _global_share(mask_BT, config, agg)
        return value, {f"actor/swarm_{k}": v for k, v in metrics.items()}

    loss.__name__ = loss.__qualname__ = f"swarm_{name}_verl_policy_loss"
    return loss


def verl_advantage_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The project's advantage estimator `name`, with verl's estimator signature (see the module docstring)."""
    fn = get_advantage_estimator(name)

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        config: Any = None,
        index: Any = None,
        **_unused: Any,  # verl passes optional extras (reward_baselines, ...) some estimators use
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if index is None:
            raise ValueError(
                f"advantage estimator swarm_{name} needs the group of each sample (verl's non-tensor 'uid')"
            )
        scale = _get(config, "norm_adv_by_std_in_grpo", None)
        overrides = {} if scale is None else {"scale_by_std": bool(scale)}
        cfg = estimator_config(name, **overrides)
        with torch.no_grad():
            adv_N = fn(rewards_N=token_level_rewards.sum(-1), group_ids_N=list(index), cfg=cfg)
            adv_NT = adv_N.to(token_level_rewards.dtype)[:, None] * response_mask.to(token_level_rewards.dtype)
        return adv_NT, adv_NT

    estimator.__name__ = estimator.__qualname__ = f"swarm_{name}_verl_advantage"
    return estimator


# One adapter object per name for the life of the process: verl's register_adv_est refuses a second,
# different function under a taken name, so registering again must hand it the very same one.
_LOSSES: dict[str, Callable[..., Any]] = {}
_ADVANTAGES: dict[str, Callable[..., Any]] = {}


def register_with_verl() -> tuple[str, ...]:
    """Register every project loss and estimator into verl's registries (idempotent); the verl names."""
    from verl.trainer.ppo.core_algos import register_adv_est, register_policy_loss

    for name in policy_loss_names():
        register_policy_loss(verl_name(name))(_LOSSES.setdefault(name, verl_policy_loss(name)))
    for name in advantage_names():
        register_adv_est(verl_name(name))(_ADVANTAGES.setdefault(name, verl_advantage_estimator(name)))
    return tuple(verl_name(n) for n in (*policy_loss_names(), *advantage_names()))


register_with_verl()
