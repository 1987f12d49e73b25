"""From finished episodes to padded training tensors (pure functions, no model).

Steps: merge each episode's timelines into samples (episode-level weights 1/k), compute one advantage
per episode with the configured estimator over task groups, give every sample its episode's advantage,
then collate into right-padded tensors for a causal LM.

Causal alignment: a sequence of token ids x_0..x_{T-1} is fed whole; position t predicts x_{t+1}. So the
tensors the loss sees are over targets x_1..x_{T-1}: `target_ids_BT`, `mask_BT` (trainable targets) and
`old_logp_BT` (sampling-time logprobs of those targets), all of width T-1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import TrainingConfig
from engine.tracking.merging import episode_samples, strip_reasoning
from engine.types import EpisodeResult, Sample


def build_samples(batch: list[EpisodeResult], training: TrainingConfig, advantages_N: torch.Tensor) -> list[Sample]:
    """Merge timelines per episode (`training.merge`, `training.strip_reasoning`) and attach each episode's
    advantage to its samples."""
    normalize = strip_reasoning if training.strip_reasoning else None
    samples: list[Sample] = []
    for ep, adv in zip(batch, advantages_N.tolist(), strict=True):
        for s in episode_samples(ep, training.merge, normalize=normalize):
            s.advantage = adv
            samples.append(s)
    return samples


@dataclass
class Collated:
    input_ids_BT: torch.Tensor  # (B, T) long, right-padded with pad_id
    attention_mask_BT: torch.Tensor  # (B, T) long
    target_ids_BT: torch.Tensor  # (B, T-1) long: input shifted left
    mask_BT: torch.Tensor  # (B, T-1) float: 1 where the target token is trainable
    old_logp_BT: torch.Tensor  # (B, T-1) float: sampling-time logprob of each target
    advantages_B: torch.Tensor  # (B,) float
    weights_B: torch.Tensor  # (B,) float: episode-level sample weights

    @property
    def n_tokens(self) -> int:
        return int(self.attention_mask_BT.sum())


def collate(samples: list[Sample], pad_id: int) -> Collated:
    """Right-pad samples into one batch (the loss mask keeps padding out of every loss and metric)."""
    T = max(s.timeline.n_tokens for s in samples)
    B = len(samples)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    old = torch.zeros((B, T), dtype=torch.float32)
    for i, s in enumerate(samples):
        tl = s.timeline
        n = tl.n_tokens
        ids[i, :n] = torch.tensor(tl.token_ids, dtype=torch.long)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(tl.loss_mask, dtype=torch.float32)
        old[i, :n] = torch.tensor(tl.logprobs, dtype=torch.float32)
    return Collated(
        input_ids_BT=ids,
        attention_mask_BT=attn,
        target_ids_BT=ids[:, 1:],
        mask_BT=mask[:, 1:],
        old_logp_BT=old[:, 1:],
        advantages_B=torch.tensor([s.advantage for s in samples], dtype=torch.float32),
        weights_B=torch.tensor([s.weight for s in samples], dtype=torch.float32),
    )


def chunks(n: int, size: int) -> list[slice]:
    """Slices covering range(n) in order, each at most `size` long."""
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def prompt_then_length(sample: Sample) -> tuple[list[int], int]:
    """Sort key: the tokens before the first trainable one, then the length. Samples of one prompt end up
    side by side (a micro-batch then runs their shared prompt once) with little padding."""
    tl = sample.timeline
    first = next((i for i, m in enumerate(tl.loss_mask) if m), tl.n_tokens)
    return tl.token_ids[:first], tl.n_tokens
