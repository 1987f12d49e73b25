"""The running decode batch. Touched only by the engine's compute thread.

One `step()` = optionally one prefill forward pass for newly admitted requests (all of them together,
left-padded) whose rows then join the batch, followed by one decode forward pass over every running row.
Rows that finish leave the batch at the end of the step (continuous batching).

With a `PrefixCache`, a prompt's longest cached leading run is copied into the prefill's past KV and only
the rest of the prompt is run; each prefilled prompt and each finished row's prompt + reply are stored
for later calls (prefix_cache.py has the invariants).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

from engine.backends.base import Completion, SamplingParams
from engine.backends.torch import kv
from engine.backends.torch.prefix_cache import PrefixCache, weights_version
from engine.backends.torch.sampling import sample_next

log = logging.getLogger(__name__)


@dataclass
class GenerationStats:
    """Counters of the forward passes the engine ran; `rows_histogram[b]` = passes with batch size b."""

    prefill_passes: int = 0
    prefill_rows: int = 0  # prompts run through prefill (identical prompts count once)
    prefill_tokens: int = 0  # prompt tokens run through prefill (cached prefixes not counted)
    decode_passes: int = 0
    tokens_generated: int = 0
    rows_histogram: Counter = field(default_factory=Counter)

    @property
    def forward_passes(self) -> int:
        return self.prefill_passes + self.decode_passes

    @property
    def max_rows(self) -> int:
        return max(self.rows_histogram, default=0)

    def reset(self) -> None:
        self.prefill_passes = self.prefill_rows = self.prefill_tokens = self.decode_passes = 0
        self.tokens_generated = 0
        self.rows_histogram.clear()

    def record(self, kind: str, rows: int) -> None:
        if kind == "prefill":
            self.prefill_passes += 1
            self.prefill_rows += rows
        else:
            self.decode_passes += 1
        self.rows_histogram[rows] += 1


@dataclass(eq=False)
class Request:
    """One `generate` call: `params.n` rows sharing a prompt; resolved when all rows finish."""

    prompt: list[int]
    params: SamplingParams
    seeds: list[int]
    loop: asyncio.AbstractEventLoop  # the caller's loop: results are handed back through it
    future: asyncio.Future
    on_token: Callable[[int, int], None] | None = None
    results: list[Completion | None] = field(default_factory=list)
    remaining: int = 0
    cancelled: bool = False  # set on the loop when the caller goes away; the compute thread drops the rows

    def __post_init__(self) -> None:
        self.results = [None] * self.params.n
        self.remaining = self.params.n


@dataclass(eq=False)
class Row:
    req: Request
    index: int  # choice index within the request
    generator: torch.Generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    text: str | None = None


class DecodeBatch:
    """Rows being decoded together plus their shared KV cache.

    Invariants between steps: `mask` [B, L] covers the cached positions; `next_ids[r]` is row r's last
    sampled token, not yet in the cache, at position `next_pos[r]`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        stop_ids: set[int],
        pad_id: int,
        stats: GenerationStats,
        prefix_cache: PrefixCache | None = None,
    ):
        self.model = model
        self.prefix_cache = prefix_cache
        self._weights = weights_version(model) if prefix_cache is not None else None
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        self.pad_id = pad_id
        self.stats = stats
        self.device = next(model.parameters()).device
        self.cache_kwarg = kv.cache_kwarg(model)
        self.reset()

    def reset(self) -> None:
        self.rows: list[Row] = []
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None
        self.next_ids: torch.Tensor | None = None
        self.next_pos: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.rows)

    # -- one scheduling step ------------------------------------------------------------------------------

    def step(self, admitted: list[Request], dropped: set[Request]) -> list[Request]:
        """Advance every row by one token (new rows by one or two); return requests that completed."""
        done: list[Request] = []
        if self.prefix_cache is not None:
            self._check_weights()
        with torch.inference_mode():
            if dropped and self.rows:
                self._keep([i for i, r in enumerate(self.rows) if r.req not in dropped])
            if admitted:
                self._prefill(admitted, done)
            if self.rows:
                self._decode(done)
        return done

    # -- forward passes -------------------------------------------------------------------------------

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: DynamicCache):
        kwargs = {self.cache_kwarg: cache}
        # logits_to_keep=1: only the last position's logits; a full [B, T, V] prefill tensor is ~200 MB.
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1, **kwargs
        )
        return out.logits[:, -1, :]

    def _prefill(self, reqs: list[Request], done: list[Request]) -> None:
        # Identical prompts (the n choices of a request, the G episodes of a GRPO group arriving as
        # separate calls) are prefilled once; their cache rows are then copied, one per choice.
        unique: dict[tuple[int, ...], int] = {}
        for r in reqs:
            unique.setdefault(tuple(r.prompt), len(unique))
        prompts = list(unique)
        ids, mask, pos, cache = self._prefill_inputs(prompts)
        logits = self._forward(ids, mask, pos, cache)
        self.stats.prefill_tokens += int(mask[:, -ids.shape[1] :].sum())
        if self.prefix_cache is not None:
            for i, prompt in enumerate(prompts):
                self.prefix_cache.insert(list(prompt), *kv.row_kv(cache, mask, i))
        self.stats.record("prefill", len(prompts))
        source = [unique[tuple(r.prompt)] for r in reqs for _ in range(r.params.n)]
        if source != list(range(len(prompts))):
            expand = torch.tensor(source, device=self.device)
            mask = kv.select_rows(cache, mask, expand)
            logits = logits.index_select(0, expand)
        rows = [
            Row(r, j, torch.Generator(device=self.device).manual_seed(r.seeds[j]))
            for r in reqs
            for j in range(r.params.n)
        ]
        tokens = self._sample(logits, rows)
        alive = [i for i, row in enumerate(rows) if self._advance(row, tokens[i], done)]
        if not alive:
            return
        index = torch.tensor(alive, device=self.device)
        if len(alive) < len(rows):
            mask = kv.select_rows(cache, mask, index)
        new_ids = torch.tensor([tokens[i] for i in alive], device=self.device)
        new_pos = torch.tensor([len(rows[i].req.prompt) for i in alive], device=self.device)
        rows = [rows[i] for i in alive]
        if not self.rows:
            self.rows, self.cache, self.mask, self.next_ids, self.next_pos = (
                rows,
                cache,
                mask,
                new_ids,
                new_pos,
            )
            return
        self.mask = kv.concat_rows(self.cache, self.mask, cache, mask)
        self.rows += rows
        self.next_ids = torch.cat([self.next_ids, new_ids])
        self.next_pos = torch.cat([self.next_pos, new_pos])

    def _prefill_inputs(self, prompts: list[tuple[int, ...]]):
        """Left-padded (ids, mask, position ids, past cache) for a prefill of `prompts`.

        Without a cached prefix the past is empty and ids hold whole prompts. With one, row i's past holds
        its first k_i tokens' KV right-aligned in K = max k_i columns and ids hold the remaining tokens,
        right-aligned too: mask [U, K + S] covers both, with padding (zeros) between them where k_i < K.
        Position ids count only real tokens, so every row sees its tokens at the positions it would have
        without the cache."""
        hits = [self.prefix_cache.match(list(p)) for p in prompts] if self.prefix_cache is not None else []
        past = max((n for _, n in hits), default=0)
        cached = [n for _, n in hits] if past else [0] * len(prompts)
        width = max(len(p) - n for p, n in zip(prompts, cached, strict=True))
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), past + width), dtype=torch.long)
        for i, (prompt, n) in enumerate(zip(prompts, cached, strict=True)):
            rest = prompt[n:]
            ids[i, width - len(rest) :] = torch.tensor(rest)
            mask[i, past + width - len(rest) :] = 1
            mask[i, past - n : past] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(-1) - 1).clamp_(min=0)[:, past:]
        if not past:
            return ids, mask, pos, kv.growing_cache()
        prefixes = [(e.keys, e.values, n) if e is not None else ([], [], 0) for e, n in hits]
        return ids, mask, pos, kv.left_padded_cache(prefixes, past)

    def _remember(self, index: int) -> None:
        """Store running row `index`'s prompt + reply (all but the last token: it is not in the cache)."""
        row = self.rows[index]
        tokens = row.req.prompt + row.tokens[:-1]
        keys, values = kv.row_kv(self.cache, self.mask, index)
        if keys and keys[0].shape[1] == len(tokens):
            self.prefix_cache.insert(tokens, keys, values)

    def _check_weights(self) -> None:
        """Drop every cached prefix if a weight changed since the last step (the KV would be stale)."""
        version = weights_version(self.model)
        if version != self._weights:
            self.prefix_cache.clear()
            self._weights = version

    def _decode(self, done: list[Request]) -> None:
        mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        logits = self._forward(self.next_ids.unsqueeze(-1), mask, self.next_pos.unsqueeze(-1), self.cache)
        self.stats.record("decode", len(self.rows))
        self.mask = mask
        tokens = self._sample(logits, self.rows)
        self.next_ids = torch.tensor(tokens, device=self.device)
        self.next_pos = self.next_pos + 1
        alive = [i for i, row in enumerate(self.rows) if self._advance(row, tokens[i], done)]
        if len(alive) < len(self.rows):
            if self.prefix_cache is not None:
                for i in sorted(set(range(len(self.rows))) - set(alive)):
                    self._remember(i)
            self._keep(alive)

    def _keep(self, alive: list[int]) -> None:
        if not alive:
            self.reset()
            return
        index = torch.tensor(alive, device=self.device)
        self.mask = kv.trim_left(self.cache, kv.select_rows(self.cache, self.mask, index))
        self.rows = [self.rows[i] for i in alive]
        self.next_ids = self.next_ids.index_select(0, index)
        self.next_pos = self.next_pos.index_select(0, index)

    # -- per-row bookkeeping ---------------------------------------------------------------------------

    def _sample(self, logits: torch.Tensor, rows: list[Row]) -> list[int]:
        tokens, logprobs = sample_next(
            logits,
            [r.req.params.temperature for r in rows],
            [r.req.params.top_p for r in rows],
            [r.generator for r in rows],
        )
        for row, lp in zip(rows, logprobs, strict=True):
            row.logprobs.append(lp)
        self.stats.tokens_generated += len(tokens)
        return tokens

    def _decode_text(self, ids: list[int]) -> str:
        # skip_special_tokens=True matches what the server streams, so streamed and final text agree.
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _advance(self, row: Row, token: int, done: list[Request]) -> bool:
        """Record `token` for `row`; finish the row if it should stop. Returns True while it keeps running."""
        row.tokens.append(token)
        params = row.req.params
        if row.req.on_token is not None:
            try:
                row.req.on_token(row.index, token)
            except Exception:  # a broken stream consumer must not kill the other rows of the batch
                log.exception("on_token callback failed; continuing generation")
        if token in self.stop_ids:
            row.finish = "stop"
        elif params.stop:
            text = self._decode_text(row.tokens)
            hits = [i for i in (text.find(s) for s in params.stop if s) if i >= 0]
            if hits:
                row.finish, row.text = "stop", text[: min(hits)]
        if row.finish is None and len(row.tokens) >= params.max_new_tokens:
            row.finish = "length"
        if row.finish is None:
            return True
        self._complete(row, done)
        return False

    def _complete(self, row: Row, done: list[Request]) -> None:
        if row.text is None:
            body = (
                row.tokens[:-1] if row.finish == "stop" else row.tokens
            )  # the end-of-turn token is not text
            row.text = self._decode_text(body)
        req = row.req
        req.results[row.index] = Completion(list(row.tokens), list(row.logprobs), row.finish, row.text)
        req.remaining -= 1
        if req.remaining == 0:
            done.append(req)
