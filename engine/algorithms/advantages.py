"""Outcome-reward advantage estimators: one scalar reward per sample -> one advantage per sample.

Implemented (registered names):
- `grpo`: group-relative normalisation, A_i = (R_i - mean_g(R)) / (std_g(R) + eps); `scale_by_std=False`
  gives Dr.GRPO's A_i = R_i - mean_g(R); the std uses Bessel's correction unless `std_unbiased=False`.
- `rloo`: leave-one-out baseline, A_i = R_i - mean_{j in g, j != i} R_j = n/(n-1) * (R_i - mean_g(R)),
  optionally divided by the group std (registered default: not).

Both give exactly 0 to every sample of a group whose rewards are all equal (including one-sample groups:
there is no baseline to compare against), so such groups contribute no policy gradient.

Deliberately not here: per-token advantages (GAE, value functions), reward whitening across the batch,
and the multi-agent HACPO baseline (`engine.algorithms.hacpo`). Advantages are constants: callers should
pass rewards without grad.
"""

from __future__ import annotations

import torch

from engine.algorithms._groups import GroupIds, group_index, group_mean, group_std, group_sum, group_uniform
from engine.algorithms.config import AdvantageConfig
from engine.algorithms.registry import register_advantage

__all__ = ["grpo_advantages", "rloo_advantages"]


def _prepare(rewards_N: torch.Tensor, group_ids_N: GroupIds) -> tuple[torch.Tensor, torch.Tensor, int]:
    if rewards_N.dim() != 1:
        raise ValueError(f"rewards_N must be 1-D (one reward per sample), got shape {tuple(rewards_N.shape)}")
    if len(group_ids_N) != rewards_N.numel():
        raise ValueError(f"group_ids_N has {len(group_ids_N)} entries for {rewards_N.numel()} rewards")
    if not rewards_N.is_floating_point():
        rewards_N = rewards_N.to(torch.get_default_dtype())
    index_N, G = group_index(group_ids_N, rewards_N.device)
    return rewards_N, index_N, G


@register_advantage("grpo")
def grpo_advantages(*, rewards_N: torch.Tensor, group_ids_N: GroupIds, cfg: AdvantageConfig) -> torch.Tensor:
    """A_i = (R_i - mean_g R) / (std_g R + eps), or R_i - mean_g R without std scaling; 0 in uniform groups."""
    R_N, index_N, G = _prepare(rewards_N, group_ids_N)
    centred_N = R_N - group_mean(R_N, index_N, G)[index_N]
    if cfg.scale_by_std:
        centred_N = centred_N / (group_std(R_N, index_N, G, cfg.std_unbiased)[index_N] + cfg.eps)
    uniform_N = group_uniform(R_N, index_N, G)[index_N]
    return torch.where(uniform_N, 0.0, centred_N)  # (N,)


@register_advantage("rloo")  # defaults (scale_by_std False) declared in engine.algorithms.builtins
def rloo_advantages(*, rewards_N: torch.Tensor, group_ids_N: GroupIds, cfg: AdvantageConfig) -> torch.Tensor:
    """A_i = R_i - mean of the other rewards of i's group (= n/(n-1) (R_i - mean_g R)); 0 in uniform groups."""
    R_N, index_N, G = _prepare(rewards_N, group_ids_N)
    n_N = group_sum(torch.ones_like(R_N), index_N, G)[index_N]
    loo_baseline_N = (group_sum(R_N, index_N, G)[index_N] - R_N) / (n_N - 1).clamp_min(1)
    adv_N = R_N - loo_baseline_N
    if cfg.scale_by_std:
        adv_N = adv_N / (group_std(R_N, index_N, G, cfg.std_unbiased)[index_N] + cfg.eps)
    uniform_N = group_uniform(R_N, index_N, G)[index_N]
    return torch.where(uniform_N, 0.0, adv_N)  # (N,)
