"""HACPO, exactly as shared/specs/hacpo.md fixes it (HACRL paper, arXiv 2603.02604).

n agents share rollouts; each learner k trains on its own samples and on the other agents' ("cross")
samples. Implemented here, for one learner k and one training step:
- capability tracking (`CapabilityTracker`): acc_j(t) = share of agent j's responses this step with
  reward > 0; P_j = mean of acc_j over the last K = 5 steps (current included), floored at 1e-8;
- capability ratios: w(k, j) = clip(P_k / P_j, 0.1, 10) (baseline weight) and
  omega(j -> k) = clip(P_j / P_k, 0.1, 10) (cross-sample modulation); both are 1 for own samples;
- capability-aware advantages per prompt group of all n*G responses (`hacpo_advantages`): A = 0 for
  uniform groups; else mu_k = mean_i w(k, src_i) R_i, replaced by the mean of k's own rewards when
  mu_k > max reward (the mu guard); sigma = Bessel std; A_i = (R_i - mu_k) / (sigma + 1e-6);
- the per-sequence objective (`hacpo_loss`), only log pi_k has grad:
    lp_k = mean over k's tokens of log pi_k(y);  s = exp(clamp(lp_k - lp_src, -10, 10))
    own (GSPO):  obj = min(s A, clip(s, 1 - eps_l, 1 + eps_h) A)
    cross:       lo = min(1, 1 - delta + m delta_step);  sc = clamp(s, lo, 1);  obj = sc sg(sc)^alpha omega A
    loss = -(weighted mean of obj over sequences) + kl_coef * KL to k's reference (own samples only).
  Inside [lo, 1] a cross sample's gradient is s^(alpha+1) omega A grad lp_k; outside it is 0.
- the baselines' switches (`HacpoConfig`): naive sharing (plain mean/std, cross samples on-policy:
  obj = exp(lp_k - sg(lp_k)) A, value A, gradient A grad lp_k, lp_src ignored), and the ablations without
  capability baseline, without omega, alpha, without cross clipping, without the stepwise schedule.

Not here (the trainer's job): sampling, computing lp_src (the generating agent's mean old log-prob,
EOS excluded; for own samples pi_old^k's), re-tokenising cross samples for k (dropping empty ones,
truncating long ones), ordering own-then-cross mini-batches and counting m, GSPO / GSPOx2 baselines
(own samples only: a sampling setting).

Per-character variant (`cross_normalization="char"`): with very different tokenizers (bytes against BPE)
the per-token means lp_k and lp_j average over different numbers of tokens, so s sits far outside [lo, 1]
and every cross sample is discarded. The variant divides both sequence log-probs by the reply's characters:
s = exp((sum log pi_k - L_j lp_j) / chars), the per-character geometric mean of the sequence ratio.

Registry: HACPO is NOT registered as an advantage estimator or policy loss; its inputs (source agents,
capabilities, per-sequence lp_src from another tokenizer, omega, m) do not fit those signatures, so this
module is its dedicated API.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from engine.algorithms._groups import GroupIds, group_index, group_mean, group_std, group_sum, group_uniform
from engine.algorithms.config import HacpoConfig
from engine.algorithms.errors import UnknownName
from engine.algorithms.losses import kl_penalty, masked_mean

__all__ = [
    "CapabilityTracker",
    "HacpoAdvantages",
    "capability_ratio",
    "capability_weights",
    "cross_lower_bound",
    "hacpo_advantages",
    "hacpo_loss",
    "hacpo_omega",
    "step_accuracy",
]

Sources = Sequence[Hashable]  # source agent of each sample


def step_accuracy(rewards_N: torch.Tensor) -> float:
    """acc_j(t): share of one agent's responses this step with reward > 0."""
    if rewards_N.numel() == 0:
        raise ValueError("no rewards: an agent without responses this step has no accuracy; skip its update")
    return (rewards_N > 0).double().mean().item()


class CapabilityTracker:
    """P_j = max(floor, mean of agent j's last `window` step accuracies), current step included.

    Agents absent from a step's `update` keep their window unchanged.
    """

    def __init__(self, window: int = 5, floor: float = 1e-8) -> None:
        if window < 1 or floor <= 0:
            raise ValueError(f"need window >= 1 and floor > 0, got window={window}, floor={floor}")
        self.window = window
        self.floor = floor
        self._acc: dict[Hashable, deque[float]] = {}

    @classmethod
    def from_config(cls, cfg: HacpoConfig) -> CapabilityTracker:
        return cls(window=cfg.capability_window, floor=cfg.capability_floor)

    def update(self, acc_by_agent: Mapping[Hashable, float]) -> None:
        """Record this step's accuracy acc_j(t) in [0, 1] of each agent that produced responses."""
        for agent, acc in acc_by_agent.items():
            if not 0.0 <= acc <= 1.0:
                raise ValueError(f"accuracy of agent {agent!r} must be in [0, 1], got {acc}")
            self._acc.setdefault(agent, deque(maxlen=self.window)).append(float(acc))

    def capability(self, agent: Hashable) -> float:
        if agent not in self._acc:
            raise UnknownName(f"no accuracy recorded for agent {agent!r}; known agents: {list(self._acc)}")
        history = self._acc[agent]
        return max(self.floor, sum(history) / len(history))

    def capabilities(self) -> dict[Hashable, float]:
        return {agent: self.capability(agent) for agent in self._acc}

    def state_dict(self) -> dict[str, Any]:
        return {"window": self.window, "floor": self.floor, "acc": {a: list(h) for a, h in self._acc.items()}}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> CapabilityTracker:
        tracker = cls(window=state["window"], floor=state["floor"])
        for agent, history in state["acc"].items():
            tracker._acc[agent] = deque(history, maxlen=tracker.window)
        return tracker


def capability_ratio(p_num: float, p_den: float, bounds: tuple[float, float] | None) -> float:
    """clip(p_num / p_den, *bounds); w(k, j) = capability_ratio(P_k, P_j), omega(j->k) = (P_j, P_k)."""
    ratio = p_num / p_den
    return ratio if bounds is None else min(max(ratio, bounds[0]), bounds[1])


def _lookup(capability: Mapping[Hashable, float], agent: Hashable) -> float:
    if agent not in capability:
        raise UnknownName(f"no capability for agent {agent!r}; known agents: {list(capability)}")
    return capability[agent]


def _per_sample(
    sources_N: Sources,
    learner: Hashable,
    capability: Mapping[Hashable, float],
    cfg: HacpoConfig,
    learner_over_src: bool,
) -> torch.Tensor:
    p_k = _lookup(capability, learner)
    p_src = [_lookup(capability, src) for src in sources_N]
    pairs = [(p_k, p_j) if learner_over_src else (p_j, p_k) for p_j in p_src]
    return torch.tensor(
        [capability_ratio(num, den, cfg.ratio_bounds) for num, den in pairs], dtype=torch.float64
    )


def capability_weights(
    *, sources_N: Sources, learner: Hashable, capability: Mapping[Hashable, float], cfg: HacpoConfig
) -> torch.Tensor:
    """w_N = w(k, src_i) = clip(P_k / P_src, 0.1, 10); all ones without the capability baseline. (N,) float64"""
    if not cfg.capability_baseline:
        return torch.ones(len(sources_N), dtype=torch.float64)
    return _per_sample(sources_N, learner, capability, cfg, learner_over_src=True)


def hacpo_omega(
    *, sources_N: Sources, learner: Hashable, capability: Mapping[Hashable, float], cfg: HacpoConfig
) -> torch.Tensor:
    """omega_N = omega(src_i -> k) = clip(P_src / P_k, 0.1, 10); all ones without omega modulation. (N,) float64"""
    if not cfg.omega_modulation:
        return torch.ones(len(sources_N), dtype=torch.float64)
    return _per_sample(sources_N, learner, capability, cfg, learner_over_src=False)


class HacpoAdvantages(NamedTuple):
    advantages_N: torch.Tensor  # A_i (N,)
    baseline_N: torch.Tensor  # mu_k of i's group, after the guard (N,)
    guarded_N: torch.Tensor  # bool: i's group fell back to the mean of k's own rewards (N,)
    uniform_N: torch.Tensor  # bool: all rewards of i's group are equal, so A_i = 0 (N,)


def hacpo_advantages(
    *,
    rewards_N: torch.Tensor,
    group_ids_N: GroupIds,
    sources_N: Sources,
    learner: Hashable,
    capability: Mapping[Hashable, float],
    cfg: HacpoConfig,
) -> HacpoAdvantages:
    """Capability-aware advantages of learner k over every prompt group (own and cross samples together).

    A group without any of k's samples falls back to its plain mean when the guard triggers.
    """
    if rewards_N.dim() != 1 or not len(group_ids_N) == len(sources_N) == rewards_N.numel():
        raise ValueError(
            f"need 1-D rewards_N with one group id and one source each; got rewards {tuple(rewards_N.shape)}, "
            f"{len(group_ids_N)} group ids, {len(sources_N)} sources"
        )
    R_N = rewards_N.to(torch.float64)
    index_N, G = group_index(group_ids_N, R_N.device)
    w_N = capability_weights(sources_N=sources_N, learner=learner, capability=capability, cfg=cfg).to(
        R_N.device
    )
    own_N = torch.tensor([src == learner for src in sources_N], dtype=torch.float64, device=R_N.device)

    mu_G = group_mean(w_N * R_N, index_N, G)  # mu_k = mean_i w(k, src_i) R_i           (G,)
    n_own_G = group_sum(own_N, index_N, G)
    own_mean_G = torch.where(  # mean of k's own rewards; plain mean if k has none in the group
        n_own_G > 0, group_sum(own_N * R_N, index_N, G) / n_own_G.clamp_min(1), group_mean(R_N, index_N, G)
    )
    guarded_G = mu_G > cfg.max_reward  # the mu guard
    mu_G = torch.where(guarded_G, own_mean_G, mu_G)
    sigma_G = group_std(R_N, index_N, G, unbiased=True)  # Bessel std of R over the group
    uniform_G = group_uniform(R_N, index_N, G)

    adv_N = (R_N - mu_G[index_N]) / (sigma_G[index_N] + cfg.adv_eps)  # A_i = (R_i - mu_k) / (sigma + eps)
    adv_N = torch.where(uniform_G[index_N], 0.0, adv_N)
    out_dtype = rewards_N.dtype if rewards_N.is_floating_point() else torch.get_default_dtype()
    return HacpoAdvantages(
        adv_N.to(out_dtype), mu_G[index_N].to(out_dtype), guarded_G[index_N], uniform_G[index_N]
    )


def cross_lower_bound(m: int, cfg: HacpoConfig) -> float:
    """lo = min(1, 1 - delta + m * delta_step); constant 1 - delta without the stepwise schedule."""
    if m < 0:
        raise ValueError(f"m counts mini-batch steps from 0, got {m}")
    if not cfg.stepwise_schedule:
        return 1.0 - cfg.delta
    return min(1.0, 1.0 - cfg.delta + m * cfg.delta_step)


def hacpo_loss(
    *,
    logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    lp_src_B: torch.Tensor,
    advantages_B: torch.Tensor,
    omega_B: torch.Tensor,
    cross_B: torch.Tensor,
    weights_B: torch.Tensor,
    m: int,
    cfg: HacpoConfig,
    ref_logp_BT: torch.Tensor | None = None,
    cross_chars_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """HACPO's per-sequence objective for one mini-batch of learner k (see the module docstring).

    logp_BT: log pi_k per token of k's tokenisation (grad); mask_BT: k's trainable response tokens;
    lp_src_B: source policy's mean old log-prob per sequence (own: pi_old^k); omega_B: omega(src -> k)
    (ignored on own rows); cross_B: bool, True for other agents' samples; weights_B: sample weights;
    m: this learner's optimizer mini-batch step within the training step, from 0.
    cross_chars_B: the per-character variant (`cfg.cross_normalization == "char"`): each cross reply's
    character count; a cross row's lp_k is then sum_t log pi_k / chars, and lp_src_B must hold the source's
    sequence log-prob divided by the same count (lp_j * L_j / chars). Own rows keep the token mean.
    Metrics: pg_loss, and per present kind: own_clip_frac, own_s_mean; cross_s_mean/min/max, cross_lo,
    cross_below_lo_frac, cross_above_1_frac (shares of cross samples without gradient); kl when given.
    """
    if logp_BT.dim() != 2 or mask_BT.shape != logp_BT.shape:
        raise ValueError(
            f"logp_BT {tuple(logp_BT.shape)} and mask_BT {tuple(mask_BT.shape)} must both be (B, T)"
        )
    if ref_logp_BT is not None and ref_logp_BT.shape != logp_BT.shape:
        raise ValueError(f"ref_logp_BT has shape {tuple(ref_logp_BT.shape)}; it must match logp_BT")
    B = logp_BT.shape[0]
    for name, t in (
        ("lp_src_B", lp_src_B),
        ("advantages_B", advantages_B),
        ("omega_B", omega_B),
        ("cross_B", cross_B),
        ("weights_B", weights_B),
    ):
        if tuple(t.shape) != (B,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}; it must be ({B},), one per sequence")
    if cfg.kl_coef > 0 and ref_logp_BT is None:
        raise ValueError("cfg.kl_coef > 0 needs ref_logp_BT (learner k's reference log-probs) or kl_coef=0")
    dtype = logp_BT.dtype
    A_B, omega_B, w_B = (t.to(dtype) for t in (advantages_B, omega_B, weights_B))
    cross_B = cross_B.bool()
    keep_BT = mask_BT.bool()
    has_tokens_B = keep_BT.any(-1)
    logp_BT = torch.where(keep_BT, logp_BT, 0.0)  # padding garbage (-inf) must not reach values or grads

    lp_k_B = masked_mean(logp_BT, mask_BT, dim=-1)  # lp_k = mean_t log pi_k(y_t)             (B,)
    if cfg.cross_normalization == "char":
        if cross_chars_B is None or tuple(cross_chars_B.shape) != (B,):
            raise ValueError("cross_normalization='char' needs cross_chars_B, one character count per sequence")
        per_char_B = logp_BT.sum(-1) / cross_chars_B.to(dtype).clamp_min(1.0)  # sum_t log pi_k / chars
        lp_k_B = torch.where(cross_B.bool(), per_char_B, lp_k_B)
    log_s_B = (lp_k_B - lp_src_B.to(dtype)).clamp(-cfg.log_ratio_clamp, cfg.log_ratio_clamp)
    s_B = log_s_B.exp()  # s = exp(clamp(lp_k - lp_src, -10, 10))                              (B,)

    # own (GSPO): obj = min(s A, clip(s, 1 - eps_l, 1 + eps_h) A)
    own_obj_B = torch.minimum(s_B * A_B, s_B.clamp(1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * A_B)
    lo = cross_lower_bound(m, cfg)
    if cfg.naive_sharing:  # on-policy surrogate: value A, gradient A grad lp_k
        cross_obj_B = (lp_k_B - lp_k_B.detach()).exp() * A_B
    else:  # sc = clamp(s, lo, 1); obj = sc * sg(sc)^alpha * omega * A
        sc_B = s_B.clamp(lo, 1.0) if cfg.cross_clip else s_B
        cross_obj_B = sc_B * sc_B.detach().pow(cfg.alpha) * omega_B * A_B
    obj_B = torch.where(cross_B, cross_obj_B, own_obj_B)

    w_B = torch.where(has_tokens_B, w_B, 0.0)
    pg_loss = -(w_B * obj_B).sum() / w_B.sum().clamp_min(torch.finfo(dtype).tiny)
    loss = pg_loss
    metrics: dict[str, float] = {"pg_loss": pg_loss.item()}
    if ref_logp_BT is not None:  # KL to k's reference, own samples only, mean per sequence then over them
        ref_logp_BT = torch.where(keep_BT, ref_logp_BT, 0.0)
        kl_B = masked_mean(kl_penalty(logp_BT, ref_logp_BT, cfg.kl_estimator), mask_BT, dim=-1)
        w_own_B = torch.where(cross_B, 0.0, w_B)
        kl = (w_own_B * kl_B).sum() / w_own_B.sum().clamp_min(torch.finfo(dtype).tiny)
        metrics["kl"] = kl.item()
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl
    metrics.update(_diagnostics(s_B.detach(), A_B, cross_B & has_tokens_B, ~cross_B & has_tokens_B, lo, cfg))
    return loss, metrics


def _diagnostics(
    s_B: torch.Tensor,
    A_B: torch.Tensor,
    cross_B: torch.Tensor,
    own_B: torch.Tensor,
    lo: float,
    cfg: HacpoConfig,
) -> dict[str, float]:
    out: dict[str, float] = {}
    if own_B.any():
        s, a = s_B[own_B], A_B[own_B]
        clipped = ((a > 0) & (s > 1.0 + cfg.eps_high)) | ((a < 0) & (s < 1.0 - cfg.eps_low))
        out.update(own_clip_frac=clipped.double().mean().item(), own_s_mean=s.mean().item())
    if cross_B.any():
        s = s_B[cross_B]
        out.update(
            cross_s_mean=s.mean().item(),
            cross_s_min=s.min().item(),
            cross_s_max=s.max().item(),
            cross_lo=lo,
            cross_below_lo_frac=(s < lo).double().mean().item(),
            cross_above_1_frac=(s > 1.0).double().mean().item(),
        )
    return out
