"""`ReplicaRouter`: the `InferenceEngine` of `backend: verl`, spreading calls over verl's vLLM replicas.

verl starts one vLLM OpenAI-compatible HTTP server per rollout replica (`LLMServerManager.server_addresses`);
each is driven token-in/token-out by its own `VllmInference` (the adapter `backend: vllm` uses, tested
against a scripted server). A call goes to the replica with the fewest calls in flight, ties broken in
turn, so held calls released together after a weight sync spread out. Pause drains every replica (the
server pauses inference around a training step, and verl puts the replicas to sleep only then); after a
failed weight sync the backend marks the router broken, and every call fails with the reason instead of
reaching a sleeping replica.

Imports httpx only (through the adapter): tested on CPU in any venv.
"""

from __future__ import annotations

import asyncio
import itertools
import threading

from engine.backends.base import Completion, SamplingParams, TokenCallback
from engine.backends.vllm.inference import VllmError, VllmInference

__all__ = ["ReplicaRouter", "pick_replica"]


def pick_replica(in_flight: list[int], turn: int) -> int:
    """Index of the replica with the fewest calls in flight; among equals, the first from `turn` on."""
    if not in_flight:
        raise ValueError("no replica to route to")
    n = len(in_flight)
    order = [(turn + i) % n for i in range(n)]
    return min(order, key=lambda i: in_flight[i])


class ReplicaRouter:
    """Token-in/token-out generation over several vLLM replicas (see the module docstring)."""

    def __init__(self, engines: list[VllmInference]) -> None:
        if not engines:
            raise ValueError("ReplicaRouter needs at least one replica")
        stops = {e.stop_token_ids for e in engines}
        if len(stops) != 1:
            raise ValueError(f"replicas disagree on the end-of-turn ids: {sorted(stops)}")
        self.engines = list(engines)
        self.stop_token_ids: tuple[int, ...] = engines[0].stop_token_ids
        self._turns = itertools.count()
        self._lock = threading.Lock()
        self._broken: str | None = None

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, on_token: TokenCallback | None = None
    ) -> list[Completion]:
        if self._broken is not None:
            raise VllmError(self._broken)
        with self._lock:
            i = pick_replica([e.in_flight for e in self.engines], next(self._turns))
        return await self.engines[i].generate(prompt_ids, params, on_token)

    async def pause(self) -> None:
        """Hold new calls on every replica and return once all calls already sent have finished."""
        await asyncio.gather(*(e.pause() for e in self.engines))

    def resume(self) -> None:
        for e in self.engines:
            e.resume()

    @property
    def paused(self) -> bool:
        return all(e.paused for e in self.engines)

    @property
    def in_flight(self) -> int:
        return sum(e.in_flight for e in self.engines)

    def mark_broken(self, reason: str) -> None:
        """Fail every later call with `reason` (the replicas no longer serve the actor's weights)."""
        self._broken = reason

    def close(self) -> None:
        for e in self.engines:
            e.close()
