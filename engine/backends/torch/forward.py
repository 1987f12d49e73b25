"""The trainer's forward pass: log-prob logits for the trainable targets only, with a shared prefix computed once.

Two savings over `model(input_ids).logits`, both exact (same numbers up to float rounding, same gradients):

- Logits only where a target is trainable. Every column before the micro-batch's first trainable target
  (the prompt) is cut before the LM head, so neither the head's matmul over the vocabulary nor the
  log-softmax runs there (`logits_to_keep`). For SmolLM2 the head is a fifth of the forward FLOPs per
  token and its [T, V] temporaries dominate memory traffic.
- A prefix shared by every row is run once. The rows of a GRPO group are one prompt with G replies;
  after sorting samples by prompt a micro-batch is usually exactly such a group, so running the prompt
  once (batch 1, with KV cache) and the replies against the cache expanded to B rows cuts the tokens
  through the network from G * (P + R) to P + G * R. Gradients reach the prefix through the cache: the
  expanded keys and values are views, and autograd sums their gradients over the rows.

Prefix length P is chosen so that no trainable target is predicted inside the prefix pass (its logits are
never computed) and the reply pass is never empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from engine.backends.torch import kv
from engine.training.batch import Collated


@dataclass(frozen=True)
class ForwardPlan:
    """Where the passes split: positions [0, prefix) run once, targets [start, T-1) get logits."""

    prefix: int
    start: int


def plan_forward(c: Collated, *, share_prefix: bool = True) -> ForwardPlan:
    """Pure: the shared-prefix length and the first trainable target column of a collated micro-batch.

    `start` is the first column of `mask_BT` with a trainable target in any row (0 when there is none, so
    the metrics still see every column). `prefix` is the longest P <= start such that columns [0, P) hold
    the same real token in every row; 0 for a single row, where sharing saves nothing.
    """
    mask = c.mask_BT
    cols = mask.any(dim=0).nonzero()
    start = int(cols[0]) if len(cols) else 0
    B = c.input_ids_BT.shape[0]
    if not share_prefix or B < 2 or start == 0:
        return ForwardPlan(prefix=0, start=start)
    ids = c.input_ids_BT[:, :start]
    same = (ids == ids[:1]).all(dim=0) & c.attention_mask_BT[:, :start].bool().all(dim=0)
    differs = (~same).nonzero()
    prefix = int(differs[0]) if len(differs) else start
    return ForwardPlan(prefix=prefix, start=start)


def target_logits(model: Any, c: Collated, plan: ForwardPlan, cache_kwarg: str) -> torch.Tensor:
    """Logits [B, T-1-start, V] over targets `start..T-2` (slice the target tensors with `[:, start:]`)."""
    ids, attn = c.input_ids_BT, c.attention_mask_BT
    B, T = ids.shape
    keep = T - plan.start  # positions start..T-1; the last one predicts past the end and is dropped
    if plan.prefix == 0:
        out = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep, use_cache=False)
        return out.logits[:, :-1]
    P = plan.prefix
    cache = DynamicCache()
    model(
        input_ids=ids[:1, :P],
        attention_mask=attn[:1, :P],
        use_cache=True,
        logits_to_keep=1,
        **{cache_kwarg: cache},
    )
    kv.expand_rows(cache, B)
    pos = torch.arange(P, T, device=ids.device).expand(B, -1)
    out = model(
        input_ids=ids[:, P:],
        attention_mask=attn,
        position_ids=pos,
        use_cache=True,
        logits_to_keep=keep,
        **{cache_kwarg: cache},
    )
    return out.logits[:, :-1]
