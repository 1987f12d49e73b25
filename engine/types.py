"""Core data types shared by tracking, the pool, the trainer and the server.

Conventions (written once, used everywhere):
- A *call* is one `/v1/chat/completions` request of an episode; each call yields one `Timeline` per
  returned choice.
- A `Timeline` is the full token sequence the model saw and produced in that call, cut into `Block`s by
  message. Token ids are the exact ids fed to / sampled from the model, never a re-tokenisation of text.
- `loss_mask` is True only for tokens the model sampled in this episode (author LLM, recorded with
  logprobs). Prompt tokens, tool results and re-rendered earlier assistant turns are context.
- Axis suffixes in the trainer and losses: B sequences, T tokens, V vocabulary, N episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Author(str, Enum):
    """Who wrote a block: the trained model, the environment (system, tools, template glue) or a user."""

    LLM = "llm"
    ENV = "env"
    USER = "user"


@dataclass(slots=True)
class Block:
    """A contiguous run of tokens with one author.

    `logprobs` is aligned with `token_ids` and set only for tokens sampled by the model (log-probability
    under the untempered policy at sampling time); `trainable` marks blocks that carry loss.
    """

    author: Author
    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    trainable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "author": self.author.value,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "logprobs": None if self.logprobs is None else list(self.logprobs),
            "trainable": self.trainable,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Block:
        return cls(Author(d["author"]), d["text"], list(d["token_ids"]), d.get("logprobs"), d["trainable"])


@dataclass(slots=True)
class Timeline:
    """The token-level record of one LLM call (one choice), or of several merged calls."""

    blocks: list[Block]
    call_index: int = 0

    @property
    def token_ids(self) -> list[int]:
        return [t for b in self.blocks for t in b.token_ids]

    @property
    def loss_mask(self) -> list[int]:
        return [int(b.trainable) for b in self.blocks for _ in b.token_ids]

    @property
    def logprobs(self) -> list[float]:
        """Sampling-time logprobs aligned with token_ids; 0.0 where the model did not sample."""
        out: list[float] = []
        for b in self.blocks:
            out.extend(b.logprobs if b.logprobs is not None else [0.0] * len(b.token_ids))
        return out

    @property
    def n_tokens(self) -> int:
        return sum(len(b.token_ids) for b in self.blocks)

    def to_dict(self) -> dict[str, Any]:
        return {"call_index": self.call_index, "blocks": [b.to_dict() for b in self.blocks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Timeline:
        return cls([Block.from_dict(b) for b in d["blocks"]], d.get("call_index", 0))


@dataclass(slots=True)
class EpisodeResult:
    """A finished training episode as it enters the sample pool."""

    episode_id: str
    task_id: str
    client_id: str
    reward: float
    timelines: list[Timeline]
    metadata: dict[str, Any] = field(default_factory=dict)
    seq: int = 0  # arrival order in the pool, assigned by the pool
    # The last call's request messages; kept only where a collaboration group re-renders them for peers.
    prompt_messages: list[dict[str, Any]] | None = None
    # The client's number for this episode among its episodes of the same task (0..N-1 in a GRPO group),
    # when it gave one: it seeds the episode's sampling (engine.server.streams), orders the episodes of a
    # batch the same way in every run, and tells a resumed job which episodes the server already holds.
    index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        extra = {} if self.prompt_messages is None else {"prompt_messages": self.prompt_messages}
        if self.index is not None:
            extra["index"] = self.index
        return {
            **extra,
            "seq": self.seq,
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "client_id": self.client_id,
            "reward": self.reward,
            "metadata": self.metadata,
            "timelines": [t.to_dict() for t in self.timelines],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeResult:
        return cls(
            d["episode_id"],
            d["task_id"],
            d["client_id"],
            float(d["reward"]),
            [Timeline.from_dict(t) for t in d["timelines"]],
            dict(d.get("metadata") or {}),
            int(d.get("seq", 0)),
            d.get("prompt_messages"),
            None if d.get("index") is None else int(d["index"]),
        )


@dataclass(slots=True)
class Sample:
    """One training sequence: a (merged) timeline with its episode's reward and loss weight.

    `weight` is the episode-level loss weight: 1/k for each of the k samples an episode produced after
    merging, so every episode counts equally however many calls it made.
    """

    timeline: Timeline
    episode_id: str
    task_id: str
    reward: float
    weight: float
    advantage: float = 0.0
