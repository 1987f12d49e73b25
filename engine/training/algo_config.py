"""The one mapping from SwarmConfig.algorithm to the algorithm functions' own configs."""

from __future__ import annotations

from engine.algorithms.config import AdvantageConfig, LossConfig
from engine.algorithms.registry import estimator_config
from engine.config import SwarmConfig


def advantage_config(cfg: SwarmConfig) -> AdvantageConfig:
    return estimator_config(cfg.algorithm.advantage, scale_by_std=cfg.algorithm.scale_by_std)


def loss_config(cfg: SwarmConfig) -> LossConfig:
    a = cfg.algorithm
    return LossConfig(
        clip_low=a.clip_low,
        clip_high=a.clip_high,
        agg=a.agg,
        max_seq_len_norm=cfg.episodes.max_tokens_default if a.agg == "seq_mean_token_sum_norm" else None,
        kl_coef=a.kl_coef,
        kl_estimator=a.kl_estimator,
        entropy_coef=a.entropy_coef,
    )
