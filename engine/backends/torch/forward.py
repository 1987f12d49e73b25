"""The trainer's forward pass: log-prob logits for the trainable targets only, a shared prefix computed once,
and no padding.

Three savings over `model(input_ids).logits`, all exact (same numbers up to float rounding, same gradients):

- Logits only where a target is trainable (`trainable_logits`). The decoder's last hidden states are
  gathered at the positions that predict a trainable target before the LM head runs. A merged multi-turn
  sample interleaves its replies with tool results and user turns, which carry no loss, and a prompt carries
  none either; the head and its log-softmax over the vocabulary cost about as much per position as the whole
  network per token. Used when the model's logits are exactly `lm_head(last_hidden_state)` (`head_parts`);
  models that scale or soft-cap their logits get the full logits, cut to the trainable span.
- A prefix shared by every row is run once. The rows of a GRPO group are one prompt with G replies; after
  sorting samples by prompt a micro-batch is usually exactly such a group, so the tokens through the network
  drop from G * (P + R) to P + G * R.
- Rows are packed (`Layout.PACKED`): one sequence holds the shared prefix once and then each row's own tokens
  after it, with each row's position ids and a block-causal attention mask (a row's token sees the prefix
  and the earlier tokens of its own row, nothing else). Padding disappears, and every weight meets one
  matmul per micro-batch instead of one per pass. The older two-pass layout (`Layout.SHARED_KV`: the
  prefix with a KV cache, then the replies against the cache expanded to B rows) gave each weight two
  gradient matmuls plus a full-size sum, and each pass its own dense embedding gradient; on SmolLM2-135M on
  CPU the packed layout made a GRPO update of 4 groups x 4 replies about 1.4x faster.
  The mask is dense, so attention work grows with the square of the packed length: long multi-turn rows
  side by side got slower packed. `plan_forward` picks the cheapest layout by a flop estimate
  (`layout_cost`), packs at most `PACK_MAX_TOKENS` tokens (the mask is N x N), and packs only for
  attention implementations that take a custom 4D additive mask (`sdpa`, `eager`; `supports_packing`).
- Packed micro-batches share a pass (`trainable_logits_stacked`): the packed sequences of several
  micro-batches (a mini-batch's groups) are stacked as the rows of one batch, each row padded to the
  longest, each with its own block-causal mask. Every weight then meets one matmul and writes its
  gradient once per pass instead of once per micro-batch; attention stays within a row, so it does not
  grow with the number of groups. `pass_groups` caps a pass at a token budget (padding included), which
  bounds its activation memory.

Prefix length P is chosen so that no trainable target is predicted inside the prefix (its logits are never
needed) and each row keeps at least one token after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from transformers import DynamicCache

from engine.backends.torch import kv
from engine.training.batch import Collated

# The packed layout's attention mask is N x N in the model's dtype (4096 tokens: 64 MiB in float32).
PACK_MAX_TOKENS = 4096

# Attention implementations that apply a custom 4D additive mask as given (transformers returns a 4D mask
# unchanged); flash-attention kernels take only padding masks.
_MASKABLE_ATTENTION = ("sdpa", "eager")


class Layout(Enum):
    """How a micro-batch's rows go through the network."""

    PADDED = "padded"  # the collated [B, T] batch as it is
    PACKED = "packed"  # one sequence: the shared prefix once, then each row's tokens; block-causal mask
    SHARED_KV = "shared_kv"  # the prefix once with a KV cache, the rows' rest against it expanded to B rows


@dataclass(frozen=True)
class ForwardPlan:
    """How a micro-batch goes through the network: positions [0, prefix) run once (shared by every row),
    targets [start, T-1) get logits, in `layout`."""

    prefix: int
    start: int
    layout: Layout = Layout.PADDED


def supports_packing(model: Any) -> bool:
    """Whether the model's attention takes the packed layout's custom 4D mask."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return impl in _MASKABLE_ATTENTION


# A second pass through the network (the KV layout's) writes and sums one more weight-sized gradient and a
# dense embedding gradient: memory-bound work that cost about 20 tokens of forward/backward compute per
# micro-batch for SmolLM2-135M on the 2-core CPU (torch.profiler; machines with more flops per byte of
# memory bandwidth make it dearer).
EXTRA_PASS_TOKENS = 32


def layout_cost(tokens: int, attention_pairs: int, hidden_size: int | None, passes: int = 1) -> float:
    """Pure: a layout's work in token-equivalents. Per layer a token's projections and MLP cost about
    24 h^2 flops and one (query, key) pair of attention 4 h, so a pair weighs 1 / (6 h) token (not counted
    without a hidden size); each pass beyond the first adds `EXTRA_PASS_TOKENS`."""
    pairs = attention_pairs / (6 * hidden_size) if hidden_size else 0.0
    return tokens + pairs + (passes - 1) * EXTRA_PASS_TOKENS


def plan_forward(
    c: Collated,
    *,
    share_prefix: bool = True,
    pack: bool = True,
    hidden_size: int | None = None,
    pack_max_tokens: int = PACK_MAX_TOKENS,
) -> ForwardPlan:
    """Pure: the shared-prefix length, the first trainable target column and the layout of a micro-batch
    (`hidden_size`: the model's, for the cost estimate).

    `start` is the first column of `mask_BT` with a trainable target in any row (0 when there is none, so
    the metrics still see every column). `prefix` is the longest P <= start such that columns [0, P) hold
    the same real token in every row; 0 for a single row, where sharing saves nothing, or with
    `share_prefix` off.

    The layout is the cheapest by `layout_cost` (ties: packed, then the KV layout, then padded), among
    those allowed: packed when `pack` allows it and the packed sequence is at most `pack_max_tokens` long,
    the KV layout when there is a prefix. Packing runs the fewest tokens, but its block-causal mask spans
    the whole packed sequence, so attention grows with the square of its length: short replies to one
    prompt pack, long multi-turn rows side by side do not (measured: docs/benchmarks/merging.md).
    """
    mask = c.mask_BT
    cols = mask.any(dim=0).nonzero()
    start = int(cols[0]) if len(cols) else 0
    B, T = c.input_ids_BT.shape
    if B < 2 or start == 0:
        return ForwardPlan(prefix=0, start=start)
    prefix = 0
    if share_prefix:
        ids = c.input_ids_BT[:, :start]
        same = (ids == ids[:1]).all(dim=0) & c.attention_mask_BT[:, :start].bool().all(dim=0)
        differs = (~same).nonzero()
        prefix = int(differs[0]) if len(differs) else start
    P, N = prefix, packed_length(c, ForwardPlan(prefix=prefix, start=start))
    costs: dict[Layout, float] = {}
    if pack and N <= pack_max_tokens:
        costs[Layout.PACKED] = layout_cost(N, N * N, hidden_size)
    if P:
        costs[Layout.SHARED_KV] = layout_cost(P + B * (T - P), P * P + B * (T - P) * T, hidden_size, passes=2)
    costs[Layout.PADDED] = layout_cost(B * T, B * T * T, hidden_size)
    layout = min(costs, key=costs.__getitem__)  # dict order breaks ties: packed, KV, padded
    return ForwardPlan(prefix=0 if layout is Layout.PADDED else P, start=start, layout=layout)


def packed_length(c: Collated, plan: ForwardPlan) -> int:
    """Pure: tokens in a micro-batch's packed sequence (its prefix once, then each row's tokens after it)."""
    B = c.input_ids_BT.shape[0]
    return plan.prefix + int(c.attention_mask_BT.sum()) - B * plan.prefix


@dataclass(frozen=True)
class Packing:
    """A micro-batch as one sequence (see `pack_rows`)."""

    ids_N: torch.Tensor  # (N,) long: the prefix, then row 0's tokens after it, row 1's, ...
    positions_N: torch.Tensor  # (N,) long: each token's position in its own row
    segments_N: torch.Tensor  # (N,) long: -1 for the prefix, r for row r's tokens
    index_BT: torch.Tensor  # (B, T-1-start) long: packed position of the state predicting each target column


def pack_rows(c: Collated, plan: ForwardPlan) -> Packing:
    """Pure: lay a right-padded micro-batch out as one sequence, the shared prefix once and padding dropped.

    `index_BT[r, j]` is where row r's column `start + j` sits in the packed sequence; it is meaningful only
    where the row has a real token there (select it with the trainable mask)."""
    ids, lens = c.input_ids_BT, c.attention_mask_BT.sum(dim=1)
    B, T = ids.shape
    P = plan.prefix
    rest = lens - P
    ids_N = torch.cat([ids[0, :P]] + [ids[r, P : int(lens[r])] for r in range(B)])
    positions_N = torch.cat([torch.arange(P)] + [torch.arange(P, int(lens[r])) for r in range(B)])
    segments_N = torch.cat(
        [torch.full((P,), -1, dtype=torch.long)]
        + [torch.full((int(rest[r]),), r, dtype=torch.long) for r in range(B)]
    )
    offsets_B = torch.cumsum(rest, 0) - rest  # where each row's tokens start after the prefix
    cols = torch.arange(plan.start, T - 1)
    index_BT = P + offsets_B[:, None] + (cols[None, :] - P)
    return Packing(
        ids_N.to(ids.device), positions_N.to(ids.device), segments_N.to(ids.device), index_BT.to(ids.device)
    )


def block_causal_mask(segments_N: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Pure: the packed sequence's additive attention mask [1, 1, N, N]: 0 where token i may see token j
    (j <= i, and j in the prefix or in i's own row), the dtype's minimum elsewhere."""
    N = segments_N.shape[0]
    causal = torch.ones(N, N, dtype=torch.bool, device=segments_N.device).tril()
    visible = causal & ((segments_N[None, :] == -1) | (segments_N[None, :] == segments_N[:, None]))
    mask = torch.zeros(N, N, dtype=dtype, device=segments_N.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min)[None, None]


# Segment id of the padding after a packed row in a stacked pass: it sees the prefix and earlier padding
# (never nothing, so no softmax row is empty), and no real token sees it (it comes after them all).
_PAD_SEGMENT = -2


@dataclass(frozen=True)
class StackedPacking:
    """Packed micro-batches as the rows of one batch (see `stack_packings`)."""

    ids_GN: torch.Tensor  # (G, N) long: row g is micro-batch g's packed sequence, padded to the longest
    positions_GN: torch.Tensor  # (G, N) long
    segments_GN: torch.Tensor  # (G, N) long: as Packing.segments_N, `_PAD_SEGMENT` on padding


def stack_packings(packings: list[Packing]) -> StackedPacking:
    """Pure: stack packed sequences as rows, right-padded to the longest (padding: token 0 at position 0)."""
    N = max(len(p.ids_N) for p in packings)

    def padded(t: torch.Tensor, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, N - len(t)), value=value)

    return StackedPacking(
        torch.stack([padded(p.ids_N, 0) for p in packings]),
        torch.stack([padded(p.positions_N, 0) for p in packings]),
        torch.stack([padded(p.segments_N, _PAD_SEGMENT) for p in packings]),
    )


def pass_groups(packed_tokens: list[int | None], max_tokens: int) -> list[list[int]]:
    """Pure: split micro-batches, in order, into passes. `packed_tokens[i]` is micro-batch i's packed length,
    None when it is not packed (it runs alone). Consecutive packed micro-batches share a pass while the
    stacked batch, rows x longest row, stays within `max_tokens`; 0 gives every micro-batch its own pass."""
    groups: list[list[int]] = []
    longest = 0
    for i, n in enumerate(packed_tokens):
        current = groups[-1] if groups else None
        if (
            n is not None
            and current is not None
            and packed_tokens[current[-1]] is not None
            and (len(current) + 1) * max(longest, n) <= max_tokens
        ):
            current.append(i)
            longest = max(longest, n)
        else:
            groups.append([i])
            longest = n or 0
    return groups


def _dtype(net: Any) -> torch.dtype:
    return next(p for p in net.parameters()).dtype


def _at_targets(
    net: Any, c: Collated, plan: ForwardPlan, cache_kwarg: str, read: Callable[[Any], torch.Tensor], **kw: Any
) -> torch.Tensor:
    """`read(net(...))` (hidden states or logits) at the positions predicting the trainable targets, [N, X],
    row-major like `tensor[trainable_mask(c, plan)]`. `kw` (logits_to_keep) applies to the unpacked layouts."""
    sel = trainable_mask(c, plan)
    ids, attn = c.input_ids_BT, c.attention_mask_BT
    B, T = ids.shape

    def span(out: torch.Tensor) -> torch.Tensor:  # out covers input positions [T - L, T): keep [start, T-1)
        L = out.shape[1]
        return out[:, plan.start - (T - L) : L - 1]

    if plan.layout is Layout.PACKED:
        p = pack_rows(c, plan)
        out = net(
            input_ids=p.ids_N[None],
            attention_mask=block_causal_mask(p.segments_N, _dtype(net)),
            position_ids=p.positions_N[None],
            use_cache=False,
        )
        return read(out)[0][p.index_BT[sel]]
    if plan.layout is Layout.PADDED:
        return span(read(net(input_ids=ids, attention_mask=attn, use_cache=False, **kw)))[sel]
    P = plan.prefix
    cache = DynamicCache()
    prefix_kw = {"logits_to_keep": 1} if kw else {}  # the prefix predicts no trainable target
    net(
        input_ids=ids[:1, :P],
        attention_mask=attn[:1, :P],
        use_cache=True,
        **{cache_kwarg: cache},
        **prefix_kw,
    )
    kv.expand_rows(cache, B)
    pos = torch.arange(P, T, device=ids.device).expand(B, -1)
    rest = net(
        input_ids=ids[:, P:],
        attention_mask=attn,
        position_ids=pos,
        use_cache=True,
        **{cache_kwarg: cache},
        **kw,
    )
    return span(read(rest))[sel]


# Config attributes of models whose logits are not plain lm_head(hidden): they keep the model's own head.
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


def trainable_mask(c: Collated, plan: ForwardPlan) -> torch.Tensor:
    """Where the trainable targets are from column `start` on: bool [B, T-1-start]."""
    return c.mask_BT[:, plan.start :].bool()


def trainable_logits(model: Any, c: Collated, plan: ForwardPlan, cache_kwarg: str) -> torch.Tensor:
    """Logits [N, V] at the N trainable targets, row-major like `tensor[trainable_mask(c, plan)]`."""
    parts = head_parts(model)
    if parts is None:
        # logits_to_keep cuts the head to the trainable span in the unpacked layouts
        return _at_targets(
            model,
            c,
            plan,
            cache_kwarg,
            lambda o: o.logits,
            logits_to_keep=c.input_ids_BT.shape[1] - plan.start,
        )
    decoder, head = parts
    return head(_at_targets(decoder, c, plan, cache_kwarg, lambda o: o.last_hidden_state))


def trainable_logits_stacked(
    model: Any, cs: list[Collated], plans: list[ForwardPlan]
) -> list[torch.Tensor]:
    """`trainable_logits` of several packed micro-batches in one pass (their packed sequences stacked as
    rows): logits [N_i, V] at micro-batch i's trainable targets, the same up to float rounding."""
    assert all(p.layout is Layout.PACKED for p in plans), "only packed micro-batches share a pass"
    packings = [pack_rows(c, p) for c, p in zip(cs, plans, strict=True)]
    stacked = stack_packings(packings)
    parts = head_parts(model)
    net = model if parts is None else parts[0]
    dtype = _dtype(net)
    out = net(
        input_ids=stacked.ids_GN,
        attention_mask=torch.cat([block_causal_mask(s, dtype) for s in stacked.segments_GN]),
        position_ids=stacked.positions_GN,
        use_cache=False,
    )
    states = out.logits if parts is None else out.last_hidden_state
    gathered = [
        states[g][p.index_BT[trainable_mask(c, plan)]]
        for g, (p, c, plan) in enumerate(zip(packings, cs, plans, strict=True))
    ]
    if parts is None:
        return gathered
    # one head matmul for every micro-batch's targets (one gradient write for the head, too)
    logits = parts[1](torch.cat(gathered))
    return list(logits.split([len(x) for x in gathered]))


def scatter_rows(sel_BT: torch.Tensor, values_N: torch.Tensor) -> torch.Tensor:
    """A [B, T] tensor with `values_N` where `sel_BT` is true and 0 elsewhere (gradients flow to values_N)."""
    out = values_N.new_zeros(sel_BT.shape)
    out[sel_BT] = values_N
    return out
