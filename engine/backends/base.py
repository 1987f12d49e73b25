"""The narrow interfaces the server depends on. Backends implement them; tests inject fakes or tiny models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling settings, as an OpenAI request expresses them."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(slots=True)
class Completion:
    """One generated choice: the exact sampled ids and their logprobs under the untempered policy.

    `token_ids` includes the terminating end-of-turn token when the model sampled one (the model must
    learn to stop); `text` is the decoded reply without it, cut before any matched stop string.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"
    text: str = ""


class InferenceEngine(Protocol):
    """Generates completions for concurrent requests; batching across requests is the engine's job."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Completion]:
        """Return `params.n` completions for one prompt."""
        ...

    async def pause(self) -> None:
        """Finish running batches and hold new requests (weight update about to start)."""
        ...

    def resume(self) -> None:
        """Release held requests."""
        ...
