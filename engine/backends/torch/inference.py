"""`TorchInferenceEngine`: continuous batching of concurrent `generate` calls over one transformers model.

Design (continuous batching, not gather-window):
- `generate()` validates, enqueues a `Request` and awaits its future. Any number of asyncio tasks (one per
  episode) may call it concurrently, from one or several event loops.
- One dedicated compute thread runs the scheduling loop and every forward pass. Between two steps it
  admits queued requests (up to `max_batch_rows` rows and `max_prefill_tokens` prompt tokens) and drops
  rows whose caller went away. A step is one prefill pass for the newcomers (their rows then join the
  running batch by padding/concatenating KV caches) plus one decode pass over all rows; finished rows
  leave the batch at once, so short replies never wait for long ones and new requests never wait for a
  batch to drain. Results go back to each caller's loop with `call_soon_threadsafe`.
- Every running row advances by exactly one token per decode pass: concurrent episodes share each forward
  pass (`stats` counts passes and batch sizes).
- `pause()` stops admissions, lets running rows finish and returns when the model is idle; held requests
  stay queued until `resume()`. The trainer mutates the same nn.Module in place while paused, so the
  first step after `resume()` already uses the new weights.
- With `prefix_cache_bytes > 0`, prompts reuse the KV of token prefixes computed before (a group's
  shared prompt, an episode's re-sent history; prefix_cache.py). `resume()` empties that cache before the
  next step, since the weights may have changed while paused.

Why the scheduling loop lives on the compute thread rather than in a coroutine that hands each step to
a thread: the engine then belongs to no event loop (callers on several loops, or a loop that is closed
and replaced, as in tests, need no re-binding), and the event loop wakes only when a request completes
(or per token when a caller streams) instead of twice per decode step.

All compute runs under `torch.inference_mode()` on that one thread, whose intra-op pool uses
`torch.get_num_threads()` cores (set it once, process-wide; `num_threads` does so), so the engine never
oversubscribes the machine.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import deque
from typing import Any

import torch

from engine.backends.base import Completion, SamplingParams, TokenCallback
from engine.backends.threadsafe import Waiters, post, settle
from engine.backends.torch import packed_linear as packed_linear_mod
from engine.backends.torch.batch import DecodeBatch, GenerationStats, Request
from engine.backends.torch.prefix_cache import PrefixCache
from engine.errors import BadRequest
from engine.models.tokens import end_of_turn_ids, ensure_pad_token

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_ROWS = 64


class TorchInferenceEngine:
    """Batched generation for many concurrent episodes over one (shared, trainable) model.

    `max_batch_rows` bounds the rows decoded together (a request counts `n` rows; one bigger than the
    bound runs alone). `max_batch_rows=1` gives plain sequential generation, the baseline for benchmarks.
    `packed_linear` gives the model's float32 CPU linear layers oneDNN-prepacked weights for inference. Off
    by default: measured 1.26-1.29x faster at 8-32 episodes on 2026-11-29, its reruns on the same machine on
    2026-12-01 gave 0.74-1.08x (docs/benchmarks/generation.md), so plain `F.linear` serves.
    `stop_token_ids` defaults to the tokenizer's end-of-turn ids; an empty list never stops early.
    `prefix_cache_bytes` > 0 keeps up to that many bytes of prefilled and generated KV for reuse by later
    prompts that start with the same tokens (0: every prompt is prefilled whole).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        stop_token_ids: list[int] | None = None,
        max_batch_rows: int = DEFAULT_MAX_BATCH_ROWS,
        max_prefill_tokens: int = 8192,
        seed: int = 0,
        num_threads: int | None = None,
        packed_linear: bool = False,
        prefix_cache_bytes: int = 0,
    ) -> None:
        if max_batch_rows < 1 or max_prefill_tokens < 1:
            raise ValueError("max_batch_rows and max_prefill_tokens must be >= 1")
        if prefix_cache_bytes < 0:
            raise ValueError("prefix_cache_bytes must be >= 0 (0 turns the prefix cache off)")
        self.model = model
        # Opt-in decode path on CPU, for as long as this engine lives; training is unaffected.
        self._packed = packed_linear_mod.install(model) if packed_linear else 0
        self.tokenizer = tokenizer
        if stop_token_ids is None:
            stop_token_ids = end_of_turn_ids(tokenizer, getattr(model, "generation_config", None))
        self.stop_token_ids: tuple[int, ...] = tuple(stop_token_ids)
        self.max_batch_rows = max_batch_rows
        self.max_prefill_tokens = max_prefill_tokens
        self.stats = GenerationStats()
        self._rng = random.Random(seed)  # seeds for requests that bring none
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self._threads = torch.get_num_threads()
        self.prefix_cache = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes else None
        self._batch = DecodeBatch(
            model,
            tokenizer,
            set(self.stop_token_ids),
            ensure_pad_token(tokenizer),
            self.stats,
            self.prefix_cache,
        )
        # Shared with the compute thread, guarded by _cond.
        self._cond = threading.Condition()
        self._queue: deque[Request] = deque()
        self._paused = False
        self._weights_may_have_changed = False
        self._closed = False
        self._idle = True
        self._idle_waiters = Waiters()
        # Owned by the compute thread.
        self._active: set[Request] = set()
        self._thread = threading.Thread(target=self._run, name="swarm-inference", daemon=True)
        self._thread.start()

    @classmethod
    def from_loaded(cls, loaded: Any, **kwargs: Any) -> TorchInferenceEngine:
        """Build from an `engine.models.LoadedModel`, using its end-of-turn ids."""
        kwargs.setdefault("stop_token_ids", loaded.end_of_turn_ids)
        return cls(loaded.model, loaded.tokenizer, **kwargs)

    # -- public API (InferenceEngine protocol) -----------------------------------------------------------

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, on_token: TokenCallback | None = None
    ) -> list[Completion]:
        """Return `params.n` completions of `prompt_ids`; batched with every other concurrent call.

        `on_token(choice_index, token_id)` runs on the compute thread for each sampled token.
        """
        self._validate(prompt_ids, params)
        if params.seed is None:
            seeds = [self._rng.getrandbits(63) for _ in range(params.n)]
        else:  # distinct, reproducible streams per choice
            seeds = [(params.seed * 1_000_003 + i) % (1 << 63) for i in range(params.n)]
        loop = asyncio.get_running_loop()
        req = Request(list(prompt_ids), params, seeds, loop, loop.create_future(), on_token)
        # A cancelled caller (client gone, episode aborted) must free its rows at the next step.
        req.future.add_done_callback(lambda f: setattr(req, "cancelled", f.cancelled()))
        with self._cond:
            if self._closed:
                raise RuntimeError("inference engine is closed")
            self._queue.append(req)
            self._cond.notify()
        return await req.future

    async def pause(self) -> None:
        """Stop admitting requests and return once no row is running (held requests stay queued)."""
        with self._cond:
            self._paused = True
            if self._idle:
                return
            fut = self._idle_waiters.add()
        await fut

    def resume(self) -> None:
        """Admit held and new requests again. Safe to call from any thread."""
        with self._cond:
            self._paused = False
            self._weights_may_have_changed = True
            self._cond.notify()

    @property
    def paused(self) -> bool:
        return self._paused

    def close(self) -> None:
        """Stop the compute thread after its current step; queued and running requests are cancelled."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=60)
        if self._packed:
            packed_linear_mod.uninstall(self.model)
        for req in list(self._queue) + list(self._active):
            post(req.loop, req.future.cancel)
        self._queue.clear()

    # -- validation ----------------------------------------------------------------------------------

    def _validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        if not prompt_ids:
            raise BadRequest("prompt is empty: at least one token is needed to generate from")
        if params.n < 1 or params.max_new_tokens < 1:
            raise BadRequest(f"n ({params.n}) and max_new_tokens ({params.max_new_tokens}) must be >= 1")
        if params.temperature < 0 or not 0 < params.top_p <= 1:
            raise BadRequest(
                f"need temperature >= 0 and 0 < top_p <= 1, got {params.temperature}, {params.top_p}"
            )
        vocab = self.model.get_input_embeddings().num_embeddings
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
            raise BadRequest(
                f"prompt token ids must be in [0, {vocab}): tokenize with this model's tokenizer"
            )
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit and len(prompt_ids) + params.max_new_tokens > limit:
            raise BadRequest(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"model's context of {limit}; shorten the prompt or lower max_tokens"
            )

    # -- the compute thread --------------------------------------------------------------------------

    def _admit(self) -> list[Request]:
        """Take queued requests that fit next to the running rows (called with _cond held)."""
        taken: list[Request] = []
        rows, tokens = len(self._batch), 0
        while self._queue:
            req = self._queue[0]
            if req.cancelled:
                self._queue.popleft()
                continue
            n, cost = req.params.n, len(req.prompt)
            busy = rows > 0 or taken
            if busy and (rows + n > self.max_batch_rows or tokens + cost > self.max_prefill_tokens):
                break
            taken.append(self._queue.popleft())
            rows, tokens = rows + n, tokens + cost
        return taken

    def _next_work(self) -> list[Request] | None:
        """Block until there is something to compute; return admitted requests (None: shut down)."""
        with self._cond:
            while not self._closed and not len(self._batch) and (self._paused or not self._queue):
                self._idle = True
                Waiters.wake(self._idle_waiters.take())
                self._cond.wait()
            if self._closed:
                return None
            if self._weights_may_have_changed and self.prefix_cache is not None:
                self.prefix_cache.clear()  # the trainer may have updated the weights while paused
            self._weights_may_have_changed = False
            self._idle = False
            return [] if self._paused else self._admit()

    def _run(self) -> None:
        torch.set_num_threads(self._threads)
        while (admitted := self._next_work()) is not None:
            dropped = {r for r in self._active if r.cancelled}
            self._active -= dropped
            self._active.update(admitted)
            try:
                done = self._batch.step(admitted, dropped)
            except Exception as e:  # e.g. out of memory: fail this batch's requests, keep serving
                log.exception("generation step failed; failing %d request(s)", len(self._active))
                for r in self._active:
                    post(r.loop, settle, r.future, None, e)
                self._active.clear()
                self._batch.reset()
                continue
            for r in done:
                self._active.discard(r)
                post(r.loop, settle, r.future, list(r.results))
