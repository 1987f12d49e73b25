"""The narrow interfaces the server depends on. Backends implement them; tests inject fakes or tiny models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from engine.types import EpisodeResult

# The one command that installs the GPU backends' dependencies (docs/engine.md, GPU backends: CUDA machines only);
# the factory and the backends name it in their errors.
GPU_INSTALL = "pip install -e '.[gpu]'"

TokenCallback = Callable[[int, int], None]


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

    stop_token_ids: tuple[int, ...]  # end-of-turn ids; tracking uses them to cut assistant blocks

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, on_token: TokenCallback | None = None
    ) -> list[Completion]:
        """Return `params.n` completions for one prompt.

        `on_token(choice_index, token_id)` is called for every sampled token as it is produced (from the
        engine's worker thread), which is what real streaming is built on.
        """
        ...

    async def pause(self) -> None:
        """Finish running batches and hold new requests (weight update about to start)."""
        ...

    def resume(self) -> None:
        """Release held requests."""
        ...

    def close(self) -> None:
        """Stop the engine; pending requests are cancelled."""
        ...


class Backend(Protocol):
    """What a swarm server needs from a backend once booted: a tokenizer, inference and a train step."""

    tokenizer: Any
    inference: InferenceEngine

    def train_step(self, batch: list[EpisodeResult]) -> dict[str, float]:
        """One full training step on a batch of finished episodes; blocking (the server runs it in a thread)."""
        ...

    def checkpoint(self) -> bool:
        """Persist weights, optimizer state and step counter if one is due; True when one was written."""
        ...

    @property
    def global_step(self) -> int: ...

    def close(self) -> None: ...
