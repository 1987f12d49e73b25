"""Learner k's view of a HACPO step (specs/hacpo.md steps 5-8), pure: episodes in, ordered samples out.

From one step's batch on learner k (own episodes plus peers' cross episodes imported by
engine.training.exchange):
- acc_j(t) per agent j from the batch's rewards, pushed into the learner's `CapabilityTracker` -> P_j;
- capability-aware advantages per prompt group of all n*G responses (`hacpo_advantages`);
- omega(src -> k) and lp_src per sequence (own: pi_old^k's mean sampling log-prob over the trainable
  tokens, the same tokens lp_k averages; cross: lp_j as exported, or lp_j * L_j / chars for the
  per-character variant);
- the samples ordered own first, then cross, so mini-batches cut in order are pure own or pure cross.

Diagnostics of the spec: P_j, omega, the share of zero-variance groups own-only vs joint, the cross
re-tokenisation length ratio and the truncated share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.algorithms import CapabilityTracker, HacpoConfig, hacpo_advantages, hacpo_omega, step_accuracy
from engine.tracking.merging import episode_samples
from engine.training.batch import chunks, prompt_then_length
from engine.training.exchange import LP_SRC_KEY, SRC_LEN_KEY, TRUNCATED_KEY, is_cross, source_of
from engine.types import EpisodeResult, Sample


@dataclass
class LearnerView:
    """Samples of one learner's step, own first; per-sample constants aligned with `samples`."""

    samples: list[Sample]
    lp_src: list[float]
    omega: list[float]
    cross: list[bool]
    n_own: int
    chars: list[float]  # reply characters per sample (cross_normalization="char" divides by them)
    metrics: dict[str, float] = field(default_factory=dict)


def _mean_sampled_logprob(sample: Sample) -> float:
    lps = [lp for b in sample.timeline.blocks if b.trainable for lp in (b.logprobs or [0.0] * len(b.token_ids))]
    return sum(lps) / len(lps) if lps else 0.0


def _reply_chars(sample: Sample) -> int:
    return sum(len(b.text) for b in sample.timeline.blocks if b.trainable)


def _cross_lp_src(ep: EpisodeResult, sample: Sample, cfg: HacpoConfig) -> float:
    """lp_src of a cross sample: lp_j as exported, or for the per-character variant the source's sequence
    log-prob over the reply's characters (lp_j * L_j / chars)."""
    lp_j = float(ep.metadata[LP_SRC_KEY])
    if cfg.cross_normalization == "token":
        return lp_j
    return lp_j * float(ep.metadata[SRC_LEN_KEY]) / max(1, _reply_chars(sample))


def _uniform_share(rewards_by_group: dict[str, list[float]]) -> float:
    groups = [r for r in rewards_by_group.values() if r]
    return sum(1 for r in groups if len(set(r)) <= 1) / len(groups) if groups else 0.0


def learner_view(
    batch: list[EpisodeResult], learner: str, tracker: CapabilityTracker, cfg: HacpoConfig, merge: str
) -> LearnerView:
    """Build learner `learner`'s ordered samples for one step and update its capability tracker."""
    sources = [source_of(e, learner) for e in batch]
    rewards_N = torch.tensor([e.reward for e in batch], dtype=torch.float64)
    by_agent: dict[str, list[int]] = {}
    for i, src in enumerate(sources):
        by_agent.setdefault(src, []).append(i)
    tracker.update({a: step_accuracy(rewards_N[idx]) for a, idx in by_agent.items()})
    capability = tracker.capabilities()
    adv = hacpo_advantages(
        rewards_N=rewards_N, group_ids_N=[e.task_id for e in batch], sources_N=sources,
        learner=learner, capability=capability, cfg=cfg,
    )
    omega_N = hacpo_omega(sources_N=sources, learner=learner, capability=capability, cfg=cfg)

    own: list[tuple[Sample, float, float]] = []
    cross: list[tuple[Sample, float, float]] = []
    for i, ep in enumerate(batch):
        for s in episode_samples(ep, merge):
            s.advantage = float(adv.advantages_N[i])
            if is_cross(ep):
                cross.append((s, _cross_lp_src(ep, s, cfg), float(omega_N[i])))
            else:
                own.append((s, _mean_sampled_logprob(s), 1.0))
    # within each part: same prompt side by side (the forward pass shares it), deterministic
    own.sort(key=lambda x: prompt_then_length(x[0]))
    cross.sort(key=lambda x: prompt_then_length(x[0]))
    ordered = own + cross

    own_groups: dict[str, list[float]] = {}
    joint_groups: dict[str, list[float]] = {}
    for ep, src in zip(batch, sources, strict=True):
        joint_groups.setdefault(ep.task_id, []).append(ep.reward)
        if src == learner:
            own_groups.setdefault(ep.task_id, []).append(ep.reward)
    metrics: dict[str, float] = {f"P/{a}": float(p) for a, p in sorted(capability.items())}
    metrics.update(
        {f"acc/{a}": float(step_accuracy(rewards_N[idx])) for a, idx in sorted(by_agent.items())},
        zero_var_frac_own=_uniform_share(own_groups),
        zero_var_frac_joint=_uniform_share(joint_groups),
        own_samples=float(len(own)),
        cross_samples=float(len(cross)),
        adv_guarded_frac=float(adv.guarded_N.double().mean()) if len(batch) else 0.0,
    )
    crossed = [e for e in batch if is_cross(e)]
    if crossed:
        ratio = [sum(len(b.token_ids) for b in e.timelines[-1].blocks if b.trainable) / e.metadata[SRC_LEN_KEY] for e in crossed]
        metrics.update(
            omega_mean=sum(o for _, _, o in cross) / len(cross),
            retok_len_ratio=sum(ratio) / len(ratio),
            retok_truncated_frac=sum(bool(e.metadata[TRUNCATED_KEY]) for e in crossed) / len(crossed),
        )
    return LearnerView(
        samples=[s for s, _, _ in ordered],
        lp_src=[lp for _, lp, _ in ordered],
        omega=[o for _, _, o in ordered],
        cross=[False] * len(own) + [True] * len(cross),
        n_own=len(own),
        chars=[float(_reply_chars(s)) for s, _, _ in ordered],
        metrics=metrics,
    )


def own_then_cross_minis(n_own: int, n: int, mini_batch_size: int) -> list[slice]:
    """Mini-batches of a learner view (own samples first): the own part and the cross part are each cut in
    order, so every mini-batch is pure own or pure cross; m counts them from 0 in this order."""
    return chunks(n_own, mini_batch_size) + [
        slice(s.start + n_own, s.stop + n_own) for s in chunks(n - n_own, mini_batch_size)
    ]
