"""Step-0 pre-check of a HACPO setting: would the other agent's answers reach the cross-sample clip band?

HACPO trains learner k on another agent's sample only while its ratio s = exp(lp_k - lp_src) lies in
[lo(m), 1], lo(m) = min(1, 1 - delta + m * delta_step), where m counts k's mini-batches in the step (own
ones first); outside the band the sample's gradient is exactly zero (specs/hacpo.md, step 9). With lp the
mean log-prob per token, s = exp(-D/L) for a total deficit D over L tokens: when the agents disagree about
each other's answers by more than -ln(lo) nats per token (0.22 at lo = 0.8, 0.13 at lo = 0.875), HACPO
discards every cross sample and is GSPO with extra rollouts thrown away. A comparison of HACPO against GSPO
then cannot show the paper's effect, whatever its size.

This module is the arithmetic, pure: given, for sampled cross answers, the learner's and the source's mean
log-probs at step 0 (pi_old = the current weights), it places the answers at every cross mini-batch the
configured step would cut (batch size, group size, mini-batch size, epochs, delta, delta_step) and returns
the share of (answer, mini-batch) visits inside the band, with a verdict against a threshold. The sampling
and scoring that produce the log-probs are the benchmark's (benchmarks/hacpo_toy.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from engine.algorithms import HacpoConfig, cross_lower_bound
from engine.training.hacpo_batch import own_then_cross_minis

__all__ = ["BandCheck", "CrossMiniBatch", "band_check", "cross_mini_batches", "importance_ratios"]

# HACPO's gain over GSPO is the gradient of the other agent's samples. Below this share of cross samples in
# the band, a learner gets under 0.3 x GSPO's own-sample count of extra gradient-carrying samples per step
# (under a third of what GSPOx2 adds at the same rollout count), and the method is close to GSPO by
# construction; a comparison there measures noise. 0.3 is this project's choice, not the paper's number.
DEFAULT_MIN_IN_BAND = 0.3


class CrossMiniBatch(BaseModel):
    """One cross mini-batch of a learner's step: its step counter m, its lower clip lo and its size."""

    model_config = ConfigDict(frozen=True)

    m: int
    lo: float
    size: int


class BandCheck(BaseModel):
    """The pre-check's figures for one learner and its verdict."""

    model_config = ConfigDict(frozen=True)

    n_answers: int
    mini_batches: list[CrossMiniBatch]
    s_median: float
    deficit_median: float  # median of lp_src - lp_k: nats per token (or per character) the learner is short
    in_band_share: float  # share of (answer, cross mini-batch) visits with lo(m) <= s <= 1: these carry gradient
    below_lo_share: float
    above_1_share: float
    mean_grad_scale: float  # mean over visits of s**(alpha+1) inside the band, 0 outside (the cross gradient's scale)
    threshold: float
    passed: bool
    reason: str


def importance_ratios(lp_learner: Sequence[float], lp_source: Sequence[float], cfg: HacpoConfig) -> list[float]:
    """s = exp(clamp(lp_k - lp_src, -c, c)) per answer, exactly as `hacpo_loss` computes it."""
    if len(lp_learner) != len(lp_source):
        raise ValueError(f"{len(lp_learner)} learner log-probs but {len(lp_source)} source log-probs; one each per answer")
    c = cfg.log_ratio_clamp
    return [math.exp(min(c, max(-c, k - j))) for k, j in zip(lp_learner, lp_source, strict=True)]


def cross_mini_batches(n_own: int, n_cross: int, mini_batch_size: int, ppo_epochs: int, cfg: HacpoConfig) -> list[CrossMiniBatch]:
    """The cross mini-batches a learner's step cuts (own first, every epoch), with m counted as the trainer
    counts it (over own and cross mini-batches, across epochs) and lo(m) as `hacpo_loss` applies it."""
    if n_cross < 1 or mini_batch_size < 1 or ppo_epochs < 1 or n_own < 0:
        raise ValueError(f"need n_cross >= 1, mini_batch_size >= 1, ppo_epochs >= 1, n_own >= 0; got {n_cross}, {mini_batch_size}, {ppo_epochs}, {n_own}")
    minis = own_then_cross_minis(n_own, n_own + n_cross, mini_batch_size)
    out = []
    for epoch in range(ppo_epochs):
        for i, mini in enumerate(minis):
            if mini.start >= n_own:
                m = epoch * len(minis) + i
                out.append(CrossMiniBatch(m=m, lo=cross_lower_bound(m, cfg), size=mini.stop - mini.start))
    return out


def band_check(
    lp_learner: Sequence[float],
    lp_source: Sequence[float],
    *,
    n_own: int,
    n_cross: int,
    mini_batch_size: int,
    ppo_epochs: int,
    cfg: HacpoConfig,
    threshold: float = DEFAULT_MIN_IN_BAND,
) -> BandCheck:
    """The share of cross answers that would carry gradient, each answer visiting every cross mini-batch of
    the configured step in proportion to its size, and whether it reaches `threshold`.

    Without cross clipping (`cfg.cross_clip` off, or naive sharing) every cross sample carries gradient."""
    if not lp_learner:
        raise ValueError("the pre-check needs at least one sampled cross answer")
    s = importance_ratios(lp_learner, lp_source, cfg)
    minis = cross_mini_batches(n_own, n_cross, mini_batch_size, ppo_epochs, cfg)
    clipped = cfg.cross_clip and not cfg.naive_sharing
    total = sum(mb.size for mb in minis)
    in_band = below = above = scale = 0.0
    for mb in minis:
        w = mb.size / total / len(s)
        for x in s:
            if not clipped or mb.lo <= x <= 1.0:
                in_band += w
                scale += w * x ** (cfg.alpha + 1)
            elif x < mb.lo:
                below += w
            else:
                above += w
    deficit = statistics.median(j - k for k, j in zip(lp_learner, lp_source, strict=True))
    passed = in_band >= threshold
    los = sorted({mb.lo for mb in minis})
    if passed:
        reason = f"{in_band:.0%} of cross samples would fall inside [lo, 1] (lo {los[0]:.3f}..{los[-1]:.3f}), at least {threshold:.0%}"
    else:
        reason = (
            f"only {in_band:.0%} of cross samples would fall inside [lo, 1] (lo {los[0]:.3f}..{los[-1]:.3f}; "
            f"{below:.0%} below lo, {above:.0%} above 1), under the {threshold:.0%} needed; HACPO would train "
            "almost only on its own samples, like GSPO. "
        )
        if below >= above:
            reason += (
                f"The learner is short {deficit:.3f} nats per unit of the source's answers (median s "
                f"{statistics.median(s):.3f}) and a sample needs under {-math.log(los[0]):.3f} to count. Change the "
                "setting: agents that agree more about each other's answers (the same base model warm-started "
                "differently), longer answers (s = exp(-D/L)), or larger mini-batches (fewer own mini-batches "
                "before the cross ones, so a lower m and lo)"
            )
        else:
            reason += (
                "Most cross answers are likelier under the learner than under their source (s > 1 gets no "
                "gradient by design): the source has nothing to teach this learner. Change the setting: a source "
                "stronger where the learner is weak (different task families or budgets), not a near copy"
            )
    return BandCheck(
        n_answers=len(s), mini_batches=minis, s_median=statistics.median(s), deficit_median=deficit,
        in_band_share=in_band, below_lo_share=below, above_1_share=above, mean_grad_scale=scale,
        threshold=threshold, passed=passed, reason=reason,
    )
