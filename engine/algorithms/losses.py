"""Policy losses (registered) and the pure tensor helpers they are built from.

Axes: B sequences, T tokens, V vocabulary. `mask_BT` is the binary loss mask (1 on trainable llm tokens,
0 on prompt, environment and padding); `weights_B` are multiplicative sample weights (episode-level
weighting gives each of the N samples of an episode 1/N). Every aggregation normalises by the *weighted*
count it averages over, so duplicating a sample equals doubling its weight and a common factor on all
weights changes nothing. Normalisers are those of the batch given: to accumulate gradients over
micro-batches exactly, scale each micro-batch's loss by its `aggregate_denominator` over the mini-batch's.

Implemented (registered names, with the LossConfig defaults each is declared with in `engine.algorithms.builtins`;
see `policy_loss_config`):
- `ppo_clip`: token-level PPO clipped surrogate, r_t = pi/pi_old per token,
  loss_t = max(-A r_t, -A clip(r_t, 1 - clip_low, 1 + clip_high)). GRPO = `grpo` advantages + this loss.
- `dapo`: the same token-level surrogate with DAPO's loss-side choices as defaults: clip-higher
  (0.2 / 0.28) and token_mean aggregation. DAPO's dynamic sampling (drop groups whose rewards are all
  equal, keep sampling) is the pool's trigger policy and its overlong shaping belongs to the reward; neither
  is here.
- `gspo`: GSPO-token. Sequence ratio s_i = exp(mean_t (log pi - log pi_old)) (length-normalised); token
  ratio s_it = sg(s_i) * pi_t / sg(pi_t), whose value is s_i and whose gradient is s_i * grad log pi_t;
  clipped like PPO with defaults 3e-4 / 4e-4 and seq_mean_token_mean. With one advantage per sequence this
  gradient equals sequence-level GSPO's.
- `nll`: supervised negative log-likelihood of the trainable tokens (SFT on given replies, e.g. to give
  agents their skills before RL); advantages and old log-probs are ignored.

Regularisers, aggregated like the policy term: + kl_coef * KL(pi || pi_ref) (estimator k1/k2/k3) and
- entropy_coef * entropy. Deliberately not here: value losses/GAE, dual-clip PPO, truncated importance
sampling for rollout-vs-trainer mismatch, per-token advantages.
"""

from __future__ import annotations

import torch

from engine.algorithms.config import Aggregation, KlEstimator, LossConfig
from engine.algorithms.registry import register_policy_loss

__all__ = [
    "aggregate",
    "aggregate_denominator",
    "dapo_loss",
    "entropy_from_logits",
    "gspo_loss",
    "nll_loss",
    "kl_penalty",
    "masked_mean",
    "ppo_clip_loss",
    "token_logprobs",
]

_PPO_LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: keeps token ratios finite; clipped tokens get no grad anyway
_GSPO_LOG_RATIO_CLAMP = 10.0  # as specs/hacpo.md for sequence ratios


def _safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den, and 0 where den == 0 (then num is 0 too: nothing was averaged)."""
    return num / torch.where(den == 0, torch.ones_like(den), den)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of x where mask is 1 (all dims, or along `dim`); 0 where nothing is unmasked.

    Masked entries are replaced (not multiplied) by 0, so inf/nan there can't leak into values or grads.
    """
    m = mask.to(x.dtype)
    x = torch.where(mask.bool(), x, 0.0)
    if dim is None:
        return _safe_div(x.sum(), m.sum())
    return _safe_div(x.sum(dim), m.sum(dim))


def aggregate_denominator(mask_BT: torch.Tensor, weights_B: torch.Tensor, mode: Aggregation) -> torch.Tensor:
    """The weighted count `aggregate` divides by: sum_i w_i n_i for token_mean, else sum_{i: n_i > 0} w_i.

    Every aggregation is num / den with num and den sums over sequences, so a mini-batch split into
    micro-batches k has loss sum_k num_k / sum_k den_k = sum_k loss_k * den_k / sum_j den_j: weighting each
    micro-batch's loss by its share of the denominator accumulates exactly the mini-batch's gradient.
    """
    m_BT = mask_BT.to(torch.float32)
    w_B = weights_B.to(torch.float32)
    if mode == "token_mean":
        return (w_B[:, None] * m_BT).sum()
    if mode not in ("seq_mean_token_mean", "seq_mean_token_sum_norm"):
        raise ValueError(
            f"unknown aggregation {mode!r}; valid: token_mean, seq_mean_token_mean, seq_mean_token_sum_norm"
        )
    return torch.where(m_BT.sum(-1) > 0, w_B, 0.0).sum()


def aggregate(
    loss_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    weights_B: torch.Tensor,
    mode: Aggregation,
    *,
    max_seq_len_norm: int | None = None,
) -> torch.Tensor:
    """Weighted reduction of per-token losses to a scalar (w_i = weights_B, m = mask_BT, n_i = sum_t m_it).

    token_mean:              sum_i w_i sum_t m_it l_it / sum_i w_i n_i
    seq_mean_token_mean:     sum_i w_i (sum_t m_it l_it / n_i) / sum_{i: n_i > 0} w_i
    seq_mean_token_sum_norm: sum_i w_i (sum_t m_it l_it / max_seq_len_norm) / sum_{i: n_i > 0} w_i
    Sequences without trainable tokens are left out of the sequence means' normalisers.
    """
    den = aggregate_denominator(mask_BT, weights_B, mode).to(loss_BT.dtype)
    w_B = weights_B.to(loss_BT.dtype)
    loss_BT = torch.where(mask_BT.bool(), loss_BT, 0.0)
    if mode == "token_mean":
        return _safe_div((w_B[:, None] * loss_BT).sum(), den)
    n_B = mask_BT.to(loss_BT.dtype).sum(-1)
    if mode == "seq_mean_token_mean":
        seq_B = _safe_div(loss_BT.sum(-1), n_B)
    else:
        if max_seq_len_norm is None:
            raise ValueError("mode 'seq_mean_token_sum_norm' needs max_seq_len_norm")
        seq_B = loss_BT.sum(-1) / max_seq_len_norm
    return _safe_div((torch.where(n_B > 0, w_B, 0.0) * seq_B).sum(), den)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: KlEstimator) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled by pi (Schulman's k1/k2/k3).

    With d = log pi - log pi_ref: k1 = d; k2 = d^2 / 2; k3 = exp(-d) + d - 1 (>= 0, low variance; -d is
    clamped to [-20, 20] so exp stays finite).
    """
    d = logp - ref_logp
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d**2
    if estimator == "k3":
        neg_d = (-d).clamp(-20.0, 20.0)
        return neg_d.exp() - neg_d - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; valid: k1, k2, k3")


def _row_chunks(x_BTV: torch.Tensor, chunk_rows: int) -> list[torch.Tensor]:
    """(B*T, V) row chunks, upcast to at least float32 one chunk at a time."""
    dtype = torch.promote_types(x_BTV.dtype, torch.float32)
    return [c.to(dtype) for c in x_BTV.reshape(-1, x_BTV.shape[-1]).split(chunk_rows)]


def entropy_from_logits(logits_BTV: torch.Tensor, *, chunk_rows: int = 1024) -> torch.Tensor:
    """H_BT = logsumexp(z) - sum_v softmax(z)_v z_v, computed over chunks of `chunk_rows` token rows.

    Chunking bounds the float32 temporaries (bf16 logits are upcast per chunk); under grad autograd still
    keeps each chunk's softmax for the backward pass, so compute it under no_grad when it is a metric only.
    """
    B, T, _ = logits_BTV.shape
    if B * T == 0:
        return logits_BTV.new_zeros(B, T)
    out = []
    for z in _row_chunks(logits_BTV, chunk_rows):
        p = torch.softmax(z, dim=-1)
        out.append(torch.logsumexp(z, dim=-1) - (p * z).sum(-1))
    return torch.cat(out).view(B, T)


def token_logprobs(
    logits_BTV: torch.Tensor, target_ids_BT: torch.Tensor, *, chunk_rows: int = 1024
) -> torch.Tensor:
    """log softmax(z)[target] = z[target] - logsumexp(z), without materialising log_softmax over V.

    logits_BTV[:, t] must be the distribution over target_ids_BT[:, t] (shift by one beforehand).
    """
    B, T, _ = logits_BTV.shape
    if tuple(target_ids_BT.shape) != (B, T):
        raise ValueError(f"target_ids_BT has shape {tuple(target_ids_BT.shape)}; logits_BTV needs ({B}, {T})")
    if B * T == 0:
        return logits_BTV.new_zeros(B, T)
    targets = target_ids_BT.reshape(-1, 1).split(chunk_rows)
    out = [
        z.gather(-1, ids).squeeze(-1) - torch.logsumexp(z, dim=-1)
        for z, ids in zip(_row_chunks(logits_BTV, chunk_rows), targets, strict=True)
    ]
    return torch.cat(out).view(B, T)


def _check_inputs(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    weights_B: torch.Tensor,
    cfg: LossConfig,
    ref_logp_BT: torch.Tensor | None,
    entropy_BT: torch.Tensor | None,
) -> None:
    if logp_BT.dim() != 2:
        raise ValueError(f"logp_BT must be (B, T), got shape {tuple(logp_BT.shape)}")
    bt = tuple(logp_BT.shape)
    for name, t in (
        ("old_logp_BT", old_logp_BT),
        ("mask_BT", mask_BT),
        ("ref_logp_BT", ref_logp_BT),
        ("entropy_BT", entropy_BT),
    ):
        if t is not None and tuple(t.shape) != bt:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; it must match logp_BT {bt}")
    for name, t in (("advantages_B", advantages_B), ("weights_B", weights_B)):
        if tuple(t.shape) != bt[:1]:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; it must be ({bt[0]},), one per sequence")
    if cfg.kl_coef > 0 and ref_logp_BT is None:
        raise ValueError(
            "cfg.kl_coef > 0 needs ref_logp_BT (reference log-probs); pass them or set kl_coef=0"
        )
    if cfg.entropy_coef > 0 and entropy_BT is None:
        raise ValueError("cfg.entropy_coef > 0 needs entropy_BT (see entropy_from_logits) or entropy_coef=0")


def _zero_masked(mask_BT: torch.Tensor, *xs_BT: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Replace masked entries by 0, so padding garbage (-inf log-probs) cannot reach values or gradients."""
    keep_BT = mask_BT.bool()
    return [None if x is None else torch.where(keep_BT, x, 0.0) for x in xs_BT]


def _approx_kl(log_ratio_BT: torch.Tensor, mask_BT: torch.Tensor) -> float:
    """Token mean of r - 1 - log r with r = pi / pi_old: the k3 estimate of KL(pi_old || pi)."""
    log_ratio_BT = log_ratio_BT.clamp(-_PPO_LOG_RATIO_CLAMP, _PPO_LOG_RATIO_CLAMP)
    return masked_mean(log_ratio_BT.exp() - 1.0 - log_ratio_BT, mask_BT).item()


def _clipped_surrogate(
    ratio_BT: torch.Tensor, advantages_B: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """loss_BT = max(-A r, -A clip(r, 1 - lo, 1 + hi)) and where the clipped branch is active (no grad)."""
    adv_B1 = advantages_B[:, None].to(ratio_BT.dtype)
    unclipped_BT = -adv_B1 * ratio_BT
    clipped_BT = -adv_B1 * ratio_BT.clamp(1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped_BT, clipped_BT), clipped_BT > unclipped_BT


def _add_regularisers(
    pg_loss: torch.Tensor,
    metrics: dict[str, float],
    logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    weights_B: torch.Tensor,
    cfg: LossConfig,
    ref_logp_BT: torch.Tensor | None,
    entropy_BT: torch.Tensor | None,
) -> torch.Tensor:
    """loss = pg_loss + kl_coef * agg(KL) - entropy_coef * agg(H); reports kl / entropy when given."""
    loss = pg_loss
    if ref_logp_BT is not None:
        kl = aggregate(
            kl_penalty(logp_BT, ref_logp_BT, cfg.kl_estimator),
            mask_BT,
            weights_B,
            cfg.agg,
            max_seq_len_norm=cfg.max_seq_len_norm,
        )
        metrics["kl"] = kl.item()
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl
    if entropy_BT is not None:
        ent = aggregate(entropy_BT, mask_BT, weights_B, cfg.agg, max_seq_len_norm=cfg.max_seq_len_norm)
        metrics["entropy"] = ent.item()
        if cfg.entropy_coef > 0:
            loss = loss - cfg.entropy_coef * ent
    return loss


@register_policy_loss("ppo_clip")
def ppo_clip_loss(
    *,
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    weights_B: torch.Tensor,
    cfg: LossConfig,
    ref_logp_BT: torch.Tensor | None = None,
    entropy_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level PPO clip. Metrics: pg_loss, clip_frac (share of trainable tokens whose clipped branch is
    active), ratio_mean (token mean of r), approx_kl (token mean of r - 1 - log r, KL(pi_old || pi)), kl, entropy."""
    _check_inputs(logp_BT, old_logp_BT, advantages_B, mask_BT, weights_B, cfg, ref_logp_BT, entropy_BT)
    logp_BT, old_logp_BT, ref_logp_BT, entropy_BT = _zero_masked(
        mask_BT, logp_BT, old_logp_BT, ref_logp_BT, entropy_BT
    )
    log_ratio_BT = (logp_BT - old_logp_BT).clamp(-_PPO_LOG_RATIO_CLAMP, _PPO_LOG_RATIO_CLAMP)
    ratio_BT = log_ratio_BT.exp()  # r_t = pi(y_t) / pi_old(y_t)
    loss_BT, clipped_BT = _clipped_surrogate(ratio_BT, advantages_B, cfg.clip_low, cfg.clip_high)
    pg_loss = aggregate(loss_BT, mask_BT, weights_B, cfg.agg, max_seq_len_norm=cfg.max_seq_len_norm)
    with torch.no_grad():
        metrics = {
            "pg_loss": pg_loss.item(),
            "clip_frac": masked_mean(clipped_BT.to(ratio_BT.dtype), mask_BT).item(),
            "ratio_mean": masked_mean(ratio_BT, mask_BT).item(),
            "approx_kl": _approx_kl(log_ratio_BT, mask_BT),
        }
    loss = _add_regularisers(pg_loss, metrics, logp_BT, mask_BT, weights_B, cfg, ref_logp_BT, entropy_BT)
    return loss, metrics


@register_policy_loss("dapo")  # defaults in engine.algorithms.builtins: clip 0.2/0.28, token_mean
def dapo_loss(
    *,
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    weights_B: torch.Tensor,
    cfg: LossConfig,
    ref_logp_BT: torch.Tensor | None = None,
    entropy_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DAPO's policy loss: ppo_clip with clip-higher and token_mean (from `policy_loss_config("dapo")`).
    Dynamic sampling is the pool's trigger policy (non-degenerate task count), not part of the loss."""
    return ppo_clip_loss(
        logp_BT=logp_BT,
        old_logp_BT=old_logp_BT,
        advantages_B=advantages_B,
        mask_BT=mask_BT,
        weights_B=weights_B,
        cfg=cfg,
        ref_logp_BT=ref_logp_BT,
        entropy_BT=entropy_BT,
    )


@register_policy_loss("gspo")  # defaults in engine.algorithms.builtins: clip 3e-4/4e-4, seq_mean_token_mean
def gspo_loss(
    *,
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    weights_B: torch.Tensor,
    cfg: LossConfig,
    ref_logp_BT: torch.Tensor | None = None,
    entropy_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO-token. Metrics: pg_loss, clip_frac (share of sequences clipped), ratio_mean (mean s_i over
    sequences), approx_kl (token mean of r - 1 - log r), kl, entropy."""
    _check_inputs(logp_BT, old_logp_BT, advantages_B, mask_BT, weights_B, cfg, ref_logp_BT, entropy_BT)
    logp_BT, old_logp_BT, ref_logp_BT, entropy_BT = _zero_masked(
        mask_BT, logp_BT, old_logp_BT, ref_logp_BT, entropy_BT
    )
    # log s_i = mean_t (log pi - log pi_old), clamped to [-10, 10]            (B,)
    seq_log_ratio_B = masked_mean(logp_BT - old_logp_BT, mask_BT, dim=-1).clamp(
        -_GSPO_LOG_RATIO_CLAMP, _GSPO_LOG_RATIO_CLAMP
    )
    # log s_it = sg(log s_i) + log pi_t - sg(log pi_t): value s_i, gradient s_i * grad log pi_t   (B, T)
    ratio_BT = (seq_log_ratio_B.detach()[:, None] + logp_BT - logp_BT.detach()).exp()
    loss_BT, clipped_BT = _clipped_surrogate(ratio_BT, advantages_B, cfg.clip_low, cfg.clip_high)
    pg_loss = aggregate(loss_BT, mask_BT, weights_B, cfg.agg, max_seq_len_norm=cfg.max_seq_len_norm)
    with torch.no_grad():
        has_tokens_B = mask_BT.bool().any(-1)
        clipped_B = (clipped_BT & mask_BT.bool()).any(-1)  # all tokens of a sequence share one clip state
        metrics = {
            "pg_loss": pg_loss.item(),
            "clip_frac": masked_mean(clipped_B.to(ratio_BT.dtype), has_tokens_B).item(),
            "ratio_mean": masked_mean(seq_log_ratio_B.exp(), has_tokens_B).item(),
            "approx_kl": _approx_kl(logp_BT - old_logp_BT, mask_BT),
        }
    loss = _add_regularisers(pg_loss, metrics, logp_BT, mask_BT, weights_B, cfg, ref_logp_BT, entropy_BT)
    return loss, metrics


@register_policy_loss("nll")  # defaults in engine.algorithms.builtins: token_mean
def nll_loss(
    *,
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    weights_B: torch.Tensor,
    cfg: LossConfig,
    ref_logp_BT: torch.Tensor | None = None,
    entropy_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Supervised NLL: aggregate(-log pi_t) over the trainable tokens (cfg.agg, weighted). advantages_B and
    old_logp_BT are accepted for the shared signature and ignored. Metrics: pg_loss (= nll), kl, entropy."""
    _check_inputs(logp_BT, old_logp_BT, advantages_B, mask_BT, weights_B, cfg, ref_logp_BT, entropy_BT)
    logp_BT, ref_logp_BT, entropy_BT = _zero_masked(mask_BT, logp_BT, ref_logp_BT, entropy_BT)
    nll = aggregate(-logp_BT, mask_BT, weights_B, cfg.agg, max_seq_len_norm=cfg.max_seq_len_norm)
    metrics = {"pg_loss": nll.item()}
    loss = _add_regularisers(nll, metrics, logp_BT, mask_BT, weights_B, cfg, ref_logp_BT, entropy_BT)
    return loss, metrics
