"""Frozen, serialisable configs of the algorithm functions, one per entry point.

- `AdvantageConfig` for registered advantage estimators (grpo, rloo);
- `LossConfig` for registered policy losses (ppo_clip, dapo, gspo);
- `HacpoConfig` for the dedicated HACPO API, including the baselines and ablations of specs/hacpo.md.

The algorithm *names* are not fields here: the caller's config picks them (validate them against
`advantage_names()` / `policy_loss_names()`), and the registry's `estimator_config` / `policy_loss_config`
build a config from the defaults the algorithm registered with (e.g. GSPO's 3e-4/4e-4 clip). Invariants are checked at
construction and the messages say what to change.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.errors import ConfigError

__all__ = ["AdvantageConfig", "Aggregation", "HacpoConfig", "KlEstimator", "LossConfig"]

Aggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
KlEstimator = Literal["k1", "k2", "k3"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AdvantageConfig(_Frozen):
    scale_by_std: bool = Field(
        True,
        description="Divide by the group's reward std (GRPO). False is Dr.GRPO: no per-group rescaling, so easy "
        "or hard groups with a small spread are not amplified. rloo registers False as its default.",
    )
    std_unbiased: bool = Field(True, description="Bessel's correction (divide by n-1) in the group std.")
    eps: float = Field(
        1e-6, ge=0, description="Added to the std before dividing; guards near-uniform groups."
    )


class LossConfig(_Frozen):
    # Core
    clip_low: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="Ratio is clipped below at 1 - clip_low. GSPO's sequence ratios need ~3e-4.",
    )
    clip_high: float = Field(
        0.2,
        ge=0,
        description="Ratio is clipped above at 1 + clip_high. DAPO's clip-higher (0.28) leaves low-probability "
        "tokens room to grow and keeps entropy up; GSPO uses ~4e-4.",
    )
    agg: Aggregation = Field(
        "token_mean",
        description="token_mean: every trainable token counts equally (long answers weigh more; DAPO). "
        "seq_mean_token_mean: mean per sequence, then over sequences (GRPO paper, GSPO). "
        "seq_mean_token_sum_norm: token sum / max_seq_len_norm per sequence, then mean (Dr.GRPO; no length bias).",
    )
    max_seq_len_norm: int | None = Field(
        None,
        gt=0,
        description="Constant divisor of seq_mean_token_sum_norm (e.g. max response tokens); only used there.",
    )
    # Regularisers
    kl_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of the KL penalty to the reference policy; >0 needs ref_logp_BT (a ref model).",
    )
    kl_estimator: KlEstimator = Field(
        "k3",
        description="k1: log ratio (unbiased, high variance, can be <0); k2: 0.5*log ratio^2; k3: low variance, >=0.",
    )
    entropy_coef: float = Field(
        0.0, ge=0, description="Weight of the entropy bonus (subtracted from the loss); >0 needs entropy_BT."
    )

    @model_validator(mode="after")
    def _check(self) -> LossConfig:
        if self.agg == "seq_mean_token_sum_norm" and self.max_seq_len_norm is None:
            raise ConfigError(
                "agg='seq_mean_token_sum_norm' divides each sequence's token sum by a constant; set "
                "max_seq_len_norm (e.g. the max response length) or choose another agg"
            )
        if self.agg != "seq_mean_token_sum_norm" and self.max_seq_len_norm is not None:
            raise ConfigError(
                f"max_seq_len_norm is only used by agg='seq_mean_token_sum_norm', not {self.agg!r}; remove it"
            )
        return self


# Field values the naive-sharing baseline implies (cross samples treated as on-policy).
_NAIVE = {
    "capability_baseline": False,
    "omega_modulation": False,
    "alpha": 0.0,
    "cross_clip": False,
    "stepwise_schedule": False,
}


class HacpoConfig(_Frozen):
    """HACPO (specs/hacpo.md). Defaults are the paper's; the flags below the core select the baselines."""

    # Core
    alpha: float = Field(
        1.0, ge=0, description="Exponent of the stop-grad weight sg(sc)**alpha on cross samples."
    )
    delta: float = Field(0.2, ge=0, le=1, description="Cross-sample lower clip starts at 1 - delta (m = 0).")
    delta_step: float = Field(
        0.025,
        ge=0,
        description="Per mini-batch step the lower clip rises: lo = min(1, 1 - delta + m*delta_step).",
    )
    eps_low: float = Field(
        3e-4, ge=0, lt=1, description="Own samples (GSPO): lower clip 1 - eps_low. Re-tune at toy scale."
    )
    eps_high: float = Field(4e-4, ge=0, description="Own samples (GSPO): upper clip 1 + eps_high.")
    capability_window: int = Field(5, ge=1, description="K: P_j is the mean accuracy of the last K steps.")
    capability_floor: float = Field(1e-8, gt=0, description="P_j is floored here so ratios stay finite.")
    ratio_bounds: tuple[float, float] = Field(
        (0.1, 10.0), description="Clip range of w(k, j) = P_k/P_j and omega(j->k) = P_j/P_k."
    )
    max_reward: float = Field(
        1.0,
        description="mu guard: if the capability baseline exceeds it, use the mean of the learner's own rewards.",
    )
    adv_eps: float = Field(1e-6, ge=0, description="A = (R - mu) / (sigma + adv_eps).")
    log_ratio_clamp: float = Field(10.0, gt=0, description="s = exp(clamp(lp_k - lp_src, -c, c)).")
    kl_coef: float = Field(
        0.0, ge=0, description="KL to the learner's reference, own samples only (paper: 0 or 1e-3)."
    )
    kl_estimator: KlEstimator = Field("k3", description="KL estimator (k3: low variance).")
    # Baselines and ablations
    capability_baseline: bool = Field(
        True,
        description="False: plain group mean as baseline (ablation 'without capability-aware baseline').",
    )
    omega_modulation: bool = Field(
        True, description="False: omega = 1 for cross samples (ablation 'without omega')."
    )
    cross_clip: bool = Field(
        True, description="False: no [lo, 1] clamp on cross ratios (ablation 'no clipping')."
    )
    stepwise_schedule: bool = Field(
        True, description="False: constant lower clip 1 - delta (ablation 'no stepwise schedule')."
    )
    cross_normalization: Literal["token", "char"] = Field(
        "token",
        description="How a cross sample's ratio s averages its log-prob. token (the spec): lp_k over k's "
        "tokens against lp_j over j's. char (the spec's variant for very different tokenizers): both "
        "sequence log-probs divided by the reply's characters, so the divisor is the same for both sides.",
    )
    naive_sharing: bool = Field(
        False,
        description="Naive sharing baseline: joint plain mean/std and cross samples treated as on-policy "
        "(surrogate exp(lp_k - sg(lp_k)), no omega/weighting/clip). Implies the five fields above; setting "
        "any of them to a conflicting value is an error.",
    )

    @model_validator(mode="before")
    @classmethod
    def _naive_implies(cls, data: Any) -> Any:
        if not (isinstance(data, dict) and data.get("naive_sharing")):
            return data
        clashes = [f"{k}={data[k]!r}" for k, v in _NAIVE.items() if k in data and data[k] != v]
        if clashes:
            raise ConfigError(
                f"naive_sharing=True treats cross samples as on-policy and implies {_NAIVE}; "
                f"drop the conflicting {', '.join(clashes)} or set naive_sharing=False"
            )
        return {**data, **_NAIVE}

    @model_validator(mode="after")
    def _check(self) -> HacpoConfig:
        lo, hi = self.ratio_bounds
        if not 0 < lo <= 1 <= hi:
            raise ConfigError(
                f"ratio_bounds {self.ratio_bounds} must satisfy 0 < low <= 1 <= high (paper: (0.1, 10))"
            )
        return self
