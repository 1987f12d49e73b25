"""Batch-dimension surgery on a transformers `DynamicCache`, the basis of continuous batching.

Rows of a running batch are left-aligned to one cache length L: row r's real tokens occupy its last
`mask[r].sum()` slots and the slots before them are padding that the attention mask hides. Keys are
stored after RoPE with each row's own position ids, so shifting a row's padding changes nothing it
computes. That makes these cheap operations exact (plus `expand_rows`, used by the trainer's shared-prefix
KV layout):
- select rows (finished rows leave),
- left-pad to a longer length and concatenate (new rows join),
- drop leading columns that are padding in every row (keeps L from growing after long rows leave).

Only full-attention caches (`DynamicLayer`: keys/values [B, H, L, D]) are supported; recurrent or
linear-attention layers hold state that cannot be padded this way.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache


def _layers(cache: DynamicCache):
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", True) or getattr(layer, "keys", None) is None:
            continue
        if layer.keys.dim() != 4:
            raise TypeError(f"continuous batching needs [B, H, L, D] KV caches, got {type(layer).__name__}")
        yield layer


def select_rows(cache: DynamicCache, mask: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Keep rows `index` (in that order) of the cache in place; return the matching mask rows."""
    for layer in _layers(cache):
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)
    return mask.index_select(0, index)


def expand_rows(cache: DynamicCache, rows: int) -> None:
    """Broadcast a one-row cache to `rows` rows in place, as views: a shared prefix is stored once, and
    under autograd the gradients of all rows sum back into it."""
    for layer in _layers(cache):
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)


def concat_rows(
    cache: DynamicCache, mask: torch.Tensor, other: DynamicCache, other_mask: torch.Tensor
) -> torch.Tensor:
    """Append `other`'s rows to `cache` in place, left-padding the shorter side; return the joint mask."""
    length = max(mask.shape[1], other_mask.shape[1])
    for layer, extra in zip(_layers(cache), _layers(other), strict=True):
        for name in ("keys", "values"):
            a, b = getattr(layer, name), getattr(extra, name)
            # F.pad's pair (left, right) for dim -2 is the 3rd/4th entry: pad sequence on the left only.
            a = F.pad(a, (0, 0, length - a.shape[-2], 0))
            b = F.pad(b, (0, 0, length - b.shape[-2], 0))
            setattr(layer, name, torch.cat([a, b], dim=0))
    mask = F.pad(mask, (length - mask.shape[1], 0))
    other_mask = F.pad(other_mask, (length - other_mask.shape[1], 0))
    return torch.cat([mask, other_mask], dim=0)


def trim_left(cache: DynamicCache, mask: torch.Tensor) -> torch.Tensor:
    """Drop leading columns that are padding in every row; return the trimmed mask."""
    lead = int((mask.cumsum(-1) == 0).sum(-1).min())
    if lead == 0:
        return mask
    for layer in _layers(cache):
        layer.keys = layer.keys[:, :, lead:, :]
        layer.values = layer.values[:, :, lead:, :]
    return mask[:, lead:]


def cache_kwarg(model: Any) -> str:
    """transformers renamed `past_key_values` to `cache` (5.2x; the old name goes in 5.40): use what exists."""
    base = (
        model.get_base_model() if hasattr(model, "get_base_model") else model
    )  # peft wrappers take **kwargs
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def row_kv(
    cache: DynamicCache, mask: torch.Tensor, row: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Copies of row `row`'s keys and values at its real (unmasked) positions: [H, T, D] per layer."""
    cols = mask[row].nonzero().squeeze(-1)
    keys, values = [], []
    for layer in _layers(cache):
        keys.append(layer.keys[row].index_select(1, cols))
        values.append(layer.values[row].index_select(1, cols))
    return keys, values


def left_padded_cache(
    prefixes: list[tuple[list[torch.Tensor], list[torch.Tensor], int]], length: int
) -> DynamicCache:
    """A cache of `len(prefixes)` rows, `length` columns: row i holds the first n_i positions of its
    (keys, values, n_i) prefix ([H, T, D] per layer) right-aligned, padding before it (n_i = 0: all padding).
    At least one prefix must be non-empty: it gives the layers' shapes."""
    shape = next(p for p in prefixes if p[2] > 0)
    cache = DynamicCache()
    for layer in range(len(shape[0])):
        tensors = []
        for part in (0, 1):  # keys, values
            like = shape[part][layer]
            out = like.new_zeros((len(prefixes), like.shape[0], length, like.shape[2]))
            for i, prefix in enumerate(prefixes):
                n = prefix[2]
                if n:
                    out[i, :, length - n :, :] = prefix[part][layer][:, :n, :]
            tensors.append(out)
        cache.update(tensors[0], tensors[1], layer)
    return cache
