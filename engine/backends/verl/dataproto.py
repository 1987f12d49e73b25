"""Pooled samples <-> verl's batch layout (a `DataProto`), both ways.

`pack_samples` / `unpack_samples` are pure torch (no verl import) and define the layout; `to_dataproto` /
`from_dataproto` wrap them in verl's `DataProto.from_dict`. Each merged sample (one timeline, its
episode's advantage and loss weight) becomes one row, split where verl splits an agent-loop output:

- prompt: the tokens before the sample's first trainable token (at least the first token), left-padded
  to P (`prompts`);
- response: everything from there on, right-padded to R (`responses`). Later environment or user turns
  of a multi-turn timeline stay in the response with response_mask 0, which is how verl's agent loops
  lay out multi-turn rollouts;
- `input_ids` = prompts ++ responses, `attention_mask` 1 on real tokens, `position_ids` = the running count
  of real tokens minus 1 (0 on left padding), as verl computes them;
- `response_mask` (B, R): 1 on trainable tokens (the tracker's loss mask);
- `old_log_probs` (B, R): the sampling-time logprobs the tracker recorded (0 where nothing was sampled);
  verl's trainer recomputes old log-probs with the actor unless told otherwise, so a loop that wants these
  must skip that recompute (the torch trainer takes them as they are unless `training.old_logprobs`
  recomputes them);
- `advantages` (B, R): the sample's advantage on its trainable tokens, 0 elsewhere (verl's convention);
- `rollout_is_weights` (B, R): the sample's loss weight (1/k for the k samples of an episode) on its
  trainable tokens. verl multiplies every policy loss by this tensor, and the swarm losses registered
  into verl (`engine.backends.verl.register`) read the per-sample weight back from it;
- `token_level_rewards` / `token_level_scores` (B, R): the episode reward on the last real token;
- non-tensors `uid` (the task id: verl's group key for advantages) and `episode_id`.

Block text is not carried (verl's batch is token-level), so a round trip restores token ids, loss mask,
response logprobs, advantage, weight, reward, task and episode; each restored block is one run of equal
loss mask (trainable runs authored by the LLM).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from engine.types import Author, Block, Sample, Timeline

__all__ = ["from_dataproto", "pack_samples", "to_dataproto", "unpack_samples"]


def _split(s: Sample) -> int:
    """Index of the first trainable token (the prompt/response boundary); n_tokens when there is none.

    Never 0 for a non-empty timeline: a causal LM has nothing that predicts the first token (it is no
    target in the torch trainer either), and verl reads each response token's log-prob from the position
    before it, so every row keeps at least one prompt token.
    """
    mask = s.timeline.loss_mask
    first = next((i for i, m in enumerate(mask) if m), len(mask))
    return max(first, min(1, len(mask)))


def pack_samples(samples: list[Sample], pad_id: int) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    """The verl batch tensors (B rows) and non-tensors for `samples`; see the module docstring."""
    if not samples:
        raise ValueError("no samples to pack: a verl batch needs at least one row")
    splits = [_split(s) for s in samples]
    P = max(splits)
    R = max(s.timeline.n_tokens - k for s, k in zip(samples, splits, strict=True))
    if R == 0:
        raise ValueError("no sample has a trainable token: nothing for verl's actor to learn from")
    B = len(samples)
    prompts = torch.full((B, P), pad_id, dtype=torch.long)
    responses = torch.full((B, R), pad_id, dtype=torch.long)
    prompt_attn = torch.zeros((B, P), dtype=torch.long)
    response_attn = torch.zeros((B, R), dtype=torch.long)
    response_mask = torch.zeros((B, R), dtype=torch.long)
    old_log_probs = torch.zeros((B, R), dtype=torch.float32)
    rewards = torch.zeros((B, R), dtype=torch.float32)
    adv_B = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    w_B = torch.tensor([s.weight for s in samples], dtype=torch.float32)
    for i, (s, k) in enumerate(zip(samples, splits, strict=True)):
        tl = s.timeline
        ids, mask, lps = tl.token_ids, tl.loss_mask, tl.logprobs
        n = len(ids)
        if k:
            prompts[i, P - k :] = torch.tensor(ids[:k], dtype=torch.long)
            prompt_attn[i, P - k :] = 1
        r = n - k
        if r:
            responses[i, :r] = torch.tensor(ids[k:], dtype=torch.long)
            response_attn[i, :r] = 1
            response_mask[i, :r] = torch.tensor(mask[k:], dtype=torch.long)
            old_log_probs[i, :r] = torch.tensor(lps[k:], dtype=torch.float32)
            rewards[i, r - 1] = s.reward  # a row without response tokens carries no loss and no reward
    attention_mask = torch.cat([prompt_attn, response_attn], dim=1)
    m = response_mask.to(torch.float32)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp_min(0),
        "response_mask": response_mask,
        "old_log_probs": old_log_probs,
        "advantages": adv_B[:, None] * m,
        "rollout_is_weights": w_B[:, None] * m,
        "token_level_rewards": rewards,
        "token_level_scores": rewards.clone(),
    }
    non_tensors = {
        "uid": np.array([s.task_id for s in samples], dtype=object),
        "episode_id": np.array([s.episode_id for s in samples], dtype=object),
    }
    return tensors, non_tensors


def _row_value(x_R: torch.Tensor, mask_R: torch.Tensor, fill: float) -> float:
    vals = x_R[mask_R.bool()]
    return float(vals[0]) if vals.numel() else fill


def _blocks(ids: list[int], mask: list[int], lps: list[float]) -> list[Block]:
    """Runs of equal loss mask as blocks: trainable runs are LLM blocks with their logprobs."""
    blocks: list[Block] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            trainable = bool(mask[start])
            blocks.append(
                Block(
                    Author.LLM if trainable else Author.ENV,
                    "",
                    ids[start:i],
                    lps[start:i] if trainable else None,
                    trainable,
                )
            )
            start = i
    return blocks


def unpack_samples(tensors: dict[str, torch.Tensor], non_tensors: dict[str, Any]) -> list[Sample]:
    """The samples a `pack_samples` batch holds (inverse of `pack_samples` up to block text)."""
    P = tensors["prompts"].shape[1]
    attn = tensors["attention_mask"]
    out: list[Sample] = []
    for i in range(attn.shape[0]):
        p_keep = attn[i, :P].bool()
        r_keep = attn[i, P:].bool()
        prompt_ids = tensors["prompts"][i][p_keep].tolist()
        resp_ids = tensors["responses"][i][r_keep].tolist()
        resp_mask_R = tensors["response_mask"][i]
        resp_mask = resp_mask_R[r_keep].tolist()
        resp_lps = tensors["old_log_probs"][i][r_keep].tolist()
        ids = prompt_ids + resp_ids
        mask = [0] * len(prompt_ids) + [int(m) for m in resp_mask]
        lps = [0.0] * len(prompt_ids) + resp_lps
        out.append(
            Sample(
                timeline=Timeline(_blocks(ids, mask, lps)),
                episode_id=str(non_tensors["episode_id"][i]),
                task_id=str(non_tensors["uid"][i]),
                reward=float(tensors["token_level_rewards"][i].sum()),
                weight=_row_value(tensors["rollout_is_weights"][i], resp_mask_R, 1.0),
                advantage=_row_value(tensors["advantages"][i], resp_mask_R, 0.0),
            )
        )
    return out


def to_dataproto(samples: list[Sample], pad_id: int) -> Any:
    """`pack_samples` as a verl `DataProto` (needs verl)."""
    from verl import DataProto

    tensors, non_tensors = pack_samples(samples, pad_id)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info={"swarm_pad_id": pad_id})


def from_dataproto(data: Any) -> list[Sample]:
    """The samples of a `to_dataproto` batch."""
    tensors = {k: data.batch[k] for k in data.batch.keys()}
    return unpack_samples(tensors, dict(data.non_tensor_batch))
