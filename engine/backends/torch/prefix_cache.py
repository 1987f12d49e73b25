"""Prefix cache: the KV of token sequences already run through the model, reused by later prompts.

A GRPO group's episodes send one prompt as separate calls, and a multi-turn episode re-sends its whole
history (prompt + the reply it sampled + the tool's answer) on every call. Keys and values at position i
depend only on tokens 0..i and the weights (causal attention; RoPE is applied before caching, with
positions counted from the sequence start), so the KV of any common leading run of tokens can be copied
instead of recomputed. This is the invariant vLLM's automatic prefix caching (block hashes chained over
the whole prefix) and SGLang's radix cache (a token trie) rest on; here the cache keeps whole sequences
and matches the longest common leading run, which also reuses part of an entry (a group's prompt inside a
stored prompt + reply).

Invariants:
- An entry holds the KV of exactly its `tokens`, positions 0..len-1, computed with the current weights.
  Any change of weights invalidates every entry: the engine clears the cache on `resume()` (the trainer
  mutates the module between `pause()` and `resume()`) and, as a second guard, whenever the parameters'
  identity or in-place version counters moved (`weights_version`).
- A match leaves at least the prompt's last token to compute: its logits sample the first reply token.
- Memory is bounded by `budget_bytes` (keys + values of every entry), least recently used first out.
  An entry that extends another (the next call of an episode) replaces it; one that another extends is
  not stored twice.

Reuse changes only floating-point rounding (another matmul shape), the same size of difference that
batching with other rows already causes; tests/engine/inference/test_prefix_cache.py bounds it.
Touched only by the engine's compute thread.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch


def weights_version(model: Any) -> tuple[tuple[int, int], ...]:
    """Identity and in-place version counter of every parameter: changes whenever a weight does.

    Optimizer steps, `copy_` and `load_state_dict` bump a parameter's `_version`; a replaced or added
    parameter (a new LoRA adapter) changes the ids. Writes through `.data` bypass the counter, which is
    why the engine also clears the cache on every `resume()`.
    """
    return tuple((id(p), p._version) for p in model.parameters())


@dataclass(eq=False)
class PrefixEntry:
    """The KV of `tokens`: per layer keys and values [H, T, D]."""

    tokens: torch.Tensor  # [T] int64, on the CPU (matching happens there)
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def __len__(self) -> int:
        return len(self.tokens)


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """Number of leading positions where two 1-D token tensors agree."""
    m = min(len(a), len(b))
    differ = (a[:m] != b[:m]).nonzero()
    return m if len(differ) == 0 else int(differ[0])


@dataclass
class PrefixCacheStats:
    """Counters: lookups, hits, prompt tokens whose KV was reused, entries evicted, invalidations."""

    lookups: int = 0
    hits: int = 0
    reused_tokens: int = 0
    prompt_tokens: int = 0
    evictions: int = 0
    invalidations: int = 0


class PrefixCache:
    """LRU map of token sequences to their KV, bounded by `budget_bytes`."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 1:
            raise ValueError("prefix cache budget must be >= 1 byte")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()  # id(entry) -> entry, oldest first
        self.nbytes = 0
        self.stats = PrefixCacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        if self._entries:
            self.stats.invalidations += 1
        self._entries.clear()
        self.nbytes = 0

    def match(self, prompt: list[int]) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest leading run with `prompt`, and that run's length, capped at
        `len(prompt) - 1`; (None, 0) when nothing shares a token."""
        self.stats.lookups += 1
        self.stats.prompt_tokens += len(prompt)
        query = torch.tensor(prompt, dtype=torch.long)
        best, best_len = None, 0
        for entry in self._entries.values():
            n = common_prefix_length(entry.tokens, query)
            if n > best_len:
                best, best_len = entry, n
        best_len = min(best_len, len(prompt) - 1)
        if best is None or best_len == 0:
            return None, 0
        self._entries.move_to_end(id(best))
        self.stats.hits += 1
        self.stats.reused_tokens += best_len
        return best, best_len

    def insert(self, tokens: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Store the KV ([H, T, D] per layer, owned by the cache from now on) of `tokens`."""
        entry = PrefixEntry(torch.tensor(tokens, dtype=torch.long), keys, values)
        if entry.nbytes > self.budget_bytes or not len(entry):
            return
        for old in list(self._entries.values()):
            n = common_prefix_length(old.tokens, entry.tokens)
            if n == len(entry):  # already held inside `old` (equal or longer)
                self._entries.move_to_end(id(old))
                return
            if n == len(old):  # `entry` extends `old`: it answers every match `old` would
                self._drop(old)
        self._entries[id(entry)] = entry
        self.nbytes += entry.nbytes
        while self.nbytes > self.budget_bytes:
            self._drop(next(iter(self._entries.values())))
            self.stats.evictions += 1

    def _drop(self, entry: PrefixEntry) -> None:
        del self._entries[id(entry)]
        self.nbytes -= entry.nbytes
