"""A pooled batch -> the rows of verl `update_actor` calls (pure torch; no verl import).

The advantages are the project's, computed on the server exactly as the torch trainer computes them (the
configured estimator over task groups, one value per episode, given to each of its merged samples); the
samples are ordered as the torch trainer orders them (`prompt_then_length`) and cut into the same
mini-batches (`plan.mini_batches`). Each mini-batch is packed in verl's layout
(`engine.backends.verl.dataproto.pack_samples`) and padded with empty rows (`pad_rows`) so that it splits
into whole micro-batches on every data-parallel rank. verl's own advantage estimator is not called: the
DataProto already carries the advantages (and the registered `swarm_*` estimators give the same values
where verl computes them itself, see `register`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.algorithms import get_advantage_estimator
from engine.backends.verl.dataproto import pack_samples
from engine.backends.verl.plan import MiniBatch, mini_batches, update_meta
from engine.config import SwarmConfig
from engine.training.algo_config import advantage_config
from engine.training.batch import build_samples, prompt_then_length
from engine.types import EpisodeResult, Sample

__all__ = ["PAD_UID", "UpdateBatch", "pad_rows", "step_samples", "update_batches"]

PAD_UID = "__swarm_pad__"  # the `uid` of padding rows (never a task id: the server makes those)


def step_samples(batch: list[EpisodeResult], cfg: SwarmConfig) -> list[Sample]:
    """The step's merged samples with their episode's advantage, in the torch trainer's order."""
    if not batch:
        raise ValueError("a training step needs at least one episode")
    rewards_N = torch.tensor([e.reward for e in batch], dtype=torch.float32)
    adv_N = get_advantage_estimator(cfg.algorithm.advantage)(
        rewards_N=rewards_N, group_ids_N=[e.task_id for e in batch], cfg=advantage_config(cfg)
    )
    samples = build_samples(batch, cfg.training, adv_N)
    samples.sort(key=prompt_then_length)
    return samples


def pad_rows(
    tensors: dict[str, torch.Tensor], non_tensors: dict[str, np.ndarray], n_pad: int, pad_id: int
) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    """`n_pad` rows appended to a packed batch that carry no loss: one real prompt token and one real
    response token (verl's unpadding needs both), response mask, advantage, weight and reward 0."""
    if n_pad == 0:
        return tensors, non_tensors
    P = tensors["prompts"].shape[1]
    R = tensors["responses"].shape[1]
    rows: dict[str, torch.Tensor] = {}
    for key, t in tensors.items():
        fill = pad_id if key in ("prompts", "responses", "input_ids") else 0
        rows[key] = torch.full((n_pad, *t.shape[1:]), fill, dtype=t.dtype)
    attn = torch.zeros((n_pad, P + R), dtype=tensors["attention_mask"].dtype)
    attn[:, P - 1 : P + 1] = 1  # the last prompt column and the first response column
    rows["attention_mask"] = attn
    rows["position_ids"] = (attn.cumsum(-1) - 1).clamp_min(0).to(tensors["position_ids"].dtype)
    out_t = {k: torch.cat([tensors[k], rows[k]]) for k in tensors}
    out_nt = dict(non_tensors)
    out_nt["uid"] = np.concatenate([non_tensors["uid"], np.array([PAD_UID] * n_pad, dtype=object)])
    out_nt["episode_id"] = np.concatenate([non_tensors["episode_id"], np.array([""] * n_pad, dtype=object)])
    return out_t, out_nt


@dataclass
class UpdateBatch:
    """One `update_actor` call: its rows in verl's layout and the non-tensor entries verl reads."""

    mini: MiniBatch
    tensors: dict[str, torch.Tensor]
    non_tensors: dict[str, np.ndarray]
    meta: dict[str, Any]
    n_tokens: int  # trainable tokens
    ref_log_prob: Any = None  # (B, R) reference log-probs, filled by the backend when the KL loss is on


def update_batches(samples: list[Sample], cfg: SwarmConfig, pad_id: int, dp_size: int) -> list[UpdateBatch]:
    """The `update_actor` calls of one epoch over `samples` (see the module docstring)."""
    out = []
    t = cfg.training
    for mb in mini_batches(len(samples), t.mini_batch_size, dp_size, t.micro_batch_size):
        tensors, non_tensors = pack_samples(samples[mb.rows], pad_id)
        has_loss = tensors["response_mask"].sum(-1) > 0
        n_tokens = int(tensors["response_mask"].sum())
        tensors, non_tensors = pad_rows(tensors, non_tensors, mb.n_pad, pad_id)
        out.append(UpdateBatch(mb, tensors, non_tensors, update_meta(cfg, mb, int(has_loss.sum())), n_tokens))
    return out
