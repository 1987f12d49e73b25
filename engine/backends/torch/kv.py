"""Batch-dimension surgery on a transformers `DynamicCache`, the basis of continuous batching.

Rows of a running batch are left-aligned to one cache length L: row r's real tokens occupy its last
`mask[r].sum()` slots and the slots before them are padding that the attention mask hides. Keys are
stored after RoPE with each row's own position ids, so shifting a row's padding changes nothing it
computes. That makes these cheap operations exact (plus `expand_rows`, used by the trainer's shared-prefix
KV layout):
- select rows (finished rows leave),
- left-pad to a longer length and concatenate (new rows join),
- drop leading columns that are padding in every row (keeps L from growing after long rows leave).

`GrowingLayer` (`growing_cache()`) is the decode batch's layer: it writes each step's new columns into
spare capacity instead of concatenating the whole cache per layer per token, which copied O(L) per token
(and, for caches over glibc's mmap threshold, page-faulted a fresh allocation every time).

Only full-attention caches (`DynamicLayer`: keys/values [B, H, L, D]) are supported; recurrent or
linear-attention layers hold state that cannot be padded this way.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

# Columns a GrowingLayer reserves past its length when it (re)allocates: at least this many, or a quarter
# of the length, so a reallocation (which copies the cache) happens once per many tokens.
MIN_SPARE_COLUMNS = 32


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys/values are views of L columns of a buffer with spare columns after them.

    `update` writes new columns into the spare capacity in place and returns views, so a decode step costs
    one column's copy instead of the whole cache's. The views hold exactly the values `torch.cat` would, in
    the same [B, H, L, D] layout (only the head stride differs), and nothing is written below a view's last
    column, so a view handed out earlier keeps its values. `trim_left` leaves a view further into the same
    buffer and `select_rows` selects the buffer's rows (`select`), so neither forces a second copy; when
    something else replaced `keys`/`values`, or the capacity is used up, the next update reallocates.
    """

    _kbuf: torch.Tensor | None = None
    _vbuf: torch.Tensor | None = None

    def _start(self) -> int | None:
        """The buffer column where `keys`/`values` begin, or None if they are not views of the buffers."""
        kbuf, vbuf = self._kbuf, self._vbuf
        if kbuf is None or not self.keys.numel():
            return None
        for view, buf in ((self.keys, kbuf), (self.values, vbuf)):
            if (
                view.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr()
                or view.shape[:2] != buf.shape[:2]
                or view.stride() != buf.stride()
            ):
                return None
        start, rest = divmod(self.keys.storage_offset() - kbuf.storage_offset(), kbuf.stride(2))
        if rest or start < 0 or self.values.storage_offset() - vbuf.storage_offset() != start * vbuf.stride(2):
            return None
        return start

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        old = self.keys.shape[-2] if self.keys.numel() else 0
        new = old + key_states.shape[-2]
        start = self._start()
        if start is None or start + new > self._kbuf.shape[-2]:
            capacity = new + max(MIN_SPARE_COLUMNS, new // 4)
            self._kbuf = self._grow(self.keys, key_states, old, capacity)
            self._vbuf = self._grow(self.values, value_states, old, capacity)
            start = 0
        self._kbuf[:, :, start + old : start + new] = key_states
        self._vbuf[:, :, start + old : start + new] = value_states
        self.keys = self._kbuf[:, :, start : start + new]
        self.values = self._vbuf[:, :, start : start + new]
        return self.keys, self.values

    def select(self, index: torch.Tensor) -> None:
        """Keep rows `index`: the buffers' rows, spare columns included, so the next update needs no copy."""
        start = self._start()
        if start is None:
            self.keys, self.values = self.keys.index_select(0, index), self.values.index_select(0, index)
            return
        end = start + self.keys.shape[-2]
        self._kbuf, self._vbuf = self._kbuf.index_select(0, index), self._vbuf.index_select(0, index)
        self.keys, self.values = self._kbuf[:, :, start:end], self._vbuf[:, :, start:end]

    @staticmethod
    def _grow(current: torch.Tensor, like: torch.Tensor, old: int, capacity: int) -> torch.Tensor:
        """A [B, H, capacity, D] buffer holding `current`'s first `old` columns (the rest uninitialised)."""
        b, h, _, d = like.shape
        buf = like.new_empty((b, h, capacity, d))
        if old:
            buf[:, :, :old] = current
        return buf


def growing_cache() -> DynamicCache:
    """An empty `DynamicCache` whose layers are `GrowingLayer`s (created lazily, as DynamicCache does)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


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
        if isinstance(layer, GrowingLayer):
            layer.select(index)
        else:
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
    cache = growing_cache()
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
