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

- The LM head only at trainable targets (`trainable_logits`). A merged multi-turn sample interleaves its
  replies with tool results and user turns, which carry no loss; the head and its log-softmax over the
  vocabulary cost about as much per position as the whole network per token, so they run only where a
  target is trainable: the decoder's last hidden states are gathered at those positions first. Used when
  the model's logits are exactly `lm_head(last_hidden_state)` (`head_parts`); models that scale or
  soft-cap their logits take the contiguous `target_logits` path.

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


# Config attributes of models whose logits are not plain lm_head(hidden): they keep the contiguous path.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def head_parts(model: Any) -> tuple[Any, Any] | None:
    """(decoder, lm_head) when the model's logits are exactly lm_head(decoder(...).last_hidden_state), else None.

    Works through a peft wrapper (attribute access reaches the wrapped model, and LoRA layers live inside
    the decoder's modules, so the adapter is applied)."""
    cfg = getattr(model, "config", None)
    if cfg is None or any(getattr(cfg, a, None) not in (None, 1, 1.0) for a in _LOGIT_TRANSFORMS):
        return None
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    decoder, head = get_decoder(), get_head()
    # transformers' get_decoder() falls back to the model itself, and for some multimodal models names a
    # module with its own LM head: only a head-less decoder returns the hidden states this path needs.
    if decoder is None or head is None or decoder is model:
        return None
    own_head = getattr(decoder, "get_output_embeddings", None)
    if own_head is not None and own_head() is not None:
        return None
    return decoder, head


def target_hidden(decoder: Any, c: Collated, plan: ForwardPlan, cache_kwarg: str) -> torch.Tensor:
    """The decoder's last hidden states [B, T-1-start, H] at the positions that predict targets start..T-2."""
    ids, attn = c.input_ids_BT, c.attention_mask_BT
    B, T = ids.shape
    if plan.prefix == 0:
        h = decoder(input_ids=ids, attention_mask=attn, use_cache=False).last_hidden_state
        return h[:, plan.start : T - 1]
    P = plan.prefix
    cache = DynamicCache()
    decoder(input_ids=ids[:1, :P], attention_mask=attn[:1, :P], use_cache=True, **{cache_kwarg: cache})
    kv.expand_rows(cache, B)
    pos = torch.arange(P, T, device=ids.device).expand(B, -1)
    h = decoder(
        input_ids=ids[:, P:], attention_mask=attn, position_ids=pos, use_cache=True, **{cache_kwarg: cache}
    ).last_hidden_state
    return h[:, plan.start - P : T - 1 - P]


def trainable_mask(c: Collated, plan: ForwardPlan) -> torch.Tensor:
    """Where the trainable targets are from column `start` on: bool [B, T-1-start]."""
    return c.mask_BT[:, plan.start :].bool()


def trainable_logits(model: Any, c: Collated, plan: ForwardPlan, cache_kwarg: str) -> torch.Tensor:
    """Logits [N, V] at the N trainable targets, row-major like `tensor[trainable_mask(c, plan)]`."""
    sel = trainable_mask(c, plan)
    parts = head_parts(model)
    if parts is None:
        return target_logits(model, c, plan, cache_kwarg)[sel]
    decoder, head = parts
    return head(target_hidden(decoder, c, plan, cache_kwarg)[sel])


def scatter_rows(sel_BT: torch.Tensor, values_N: torch.Tensor) -> torch.Tensor:
    """A [B, T] tensor with `values_N` where `sel_BT` is true and 0 elsewhere (gradients flow to values_N)."""
    out = values_N.new_zeros(sel_BT.shape)
    out[sel_BT] = values_N
    return out
