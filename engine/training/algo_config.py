"""The one mapping from SwarmConfig.algorithm to the algorithm functions' own configs."""

from __future__ import annotations

from engine.algorithms.config import AdvantageConfig, LossConfig
from engine.algorithms.registry import estimator_config
from engine.config import OldLogprobs, SwarmConfig

HALF_PRECISION = ("bfloat16", "float16")


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


def recomputes_old_logprobs(cfg: SwarmConfig) -> bool:
    """Whether the trainer recomputes the old policy's log-probs (`training.old_logprobs`, `auto` resolved):
    the sampling-time values match the trainer's forward only when both run the same float32 kernels (the
    torch backend: about 1e-5 nats a token on SmolLM2-135M); in bfloat16, or from vLLM's kernels, they
    differ by about 0.04 nats a token (0.006 on a sequence's mean), which a GSPO sequence clip of 3e-3
    reads as off-policy for most samples."""
    mode = cfg.training.old_logprobs
    if mode is OldLogprobs.AUTO:
        return cfg.model.dtype in HALF_PRECISION or cfg.backend == "vllm"
    return mode is OldLogprobs.RECOMPUTED
