"""Per-episode context tracker: one `Timeline` per returned choice of every LLM call, in call order.

`ContextTracker.record_call(rendered, completions)` appends, for each completion, a timeline made of the
prompt's blocks (copied from `render_prompt`, so later mutation of one timeline never leaks into another)
followed by one LLM block holding the exact sampled `token_ids` and `logprobs` (trainable=True). All
choices of one call share its `call_index` (0, 1, 2, ... in the order calls were recorded).

The LLM block's text is `completion.text` plus the text of the end-of-turn token when the reply ended with
one (`rendered.end_of_turn`), because a re-rendered assistant block (engine.tracking.chat) ends with that
token too; text-mode merging compares these texts. A completion with no tokens adds a timeline without an
LLM block (nothing to train on).

Pure: no I/O, no clocks, no asyncio; the server serialises access (one owner per episode).
Not implemented: per-call metadata (latency, sampling params) - the server keeps those if it wants them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.backends.base import Completion
from engine.tracking.chat import RenderedPrompt
from engine.types import Author, Block, Timeline

__all__ = ["ContextTracker"]


def _copy(block: Block) -> Block:
    return Block(
        block.author,
        block.text,
        list(block.token_ids),
        None if block.logprobs is None else list(block.logprobs),
        block.trainable,
    )


class ContextTracker:
    """Records every call of one episode at token level."""

    def __init__(self) -> None:
        self._timelines: list[Timeline] = []
        self._n_calls = 0

    @property
    def timelines(self) -> list[Timeline]:
        """All timelines so far, in call order (a new list; the timelines themselves are live)."""
        return list(self._timelines)

    @property
    def n_calls(self) -> int:
        return self._n_calls

    def record_call(self, rendered: RenderedPrompt, completions: Sequence[Completion]) -> list[Timeline]:
        """Append one timeline per completion and return them.

        Raises ValueError when a completion's logprobs are not aligned with its token ids (a backend bug;
        training on it would silently misalign the loss).
        """
        for n, c in enumerate(completions):
            if len(c.token_ids) != len(c.logprobs):
                raise ValueError(
                    f"completion {n}: {len(c.token_ids)} token ids but {len(c.logprobs)} logprobs"
                )
        call_index = self._n_calls
        self._n_calls += 1
        new: list[Timeline] = []
        for c in completions:
            blocks = [_copy(b) for b in rendered.blocks]
            if c.token_ids:
                text = c.text + rendered.end_of_turn.get(c.token_ids[-1], "")
                blocks.append(
                    Block(Author.LLM, text, list(c.token_ids), [float(x) for x in c.logprobs], True)
                )
            new.append(Timeline(blocks, call_index))
        self._timelines.extend(new)
        return new

    def to_dict(self) -> dict[str, Any]:
        return {"n_calls": self._n_calls, "timelines": [t.to_dict() for t in self._timelines]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ContextTracker:
        tracker = cls()
        tracker._timelines = [Timeline.from_dict(t) for t in d.get("timelines", [])]
        tracker._n_calls = int(
            d.get("n_calls", 1 + max((t.call_index for t in tracker._timelines), default=-1))
        )
        return tracker
