"""Names shared by the verl translation and the registration module (no verl import here)."""

from __future__ import annotations

__all__ = ["AGG_FROM_VERL", "AGG_TO_VERL", "EXTERNAL_LIB", "PREFIX", "verl_name"]

PREFIX = "swarm_"
EXTERNAL_LIB = "engine.backends.verl.register"  # the module every verl worker imports to register ours

# SwarmConfig.algorithm.agg -> verl's actor.loss_agg_mode (the three modes both sides define alike)
AGG_TO_VERL = {
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
AGG_FROM_VERL = {v: k for k, v in AGG_TO_VERL.items()}


def verl_name(name: str) -> str:
    """The verl registry key of a project algorithm name (`gspo` -> `swarm_gspo`): verl owns `grpo`,
    `rloo` and `gspo` already, with its own implementations."""
    return PREFIX + name
