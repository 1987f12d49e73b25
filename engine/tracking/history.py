"""Exact histories: a re-sent assistant message is fed to the model as the token ids it sampled.

A client that keeps its conversation sends every earlier reply back as text, and the chat template
re-renders it (engine.tracking.chat). The re-rendered ids can differ from the ids the model sampled for the
same text: the sampler may produce a non-canonical tokenisation ("Hel" + "lo" where the tokenizer says
"Hello"). The model would then be conditioned on a context it never produced, and token-mode merging
(engine.tracking.merging) could not fold the earlier call into the later one.

`reuse_sampled_ids` replaces the ids of each re-rendered assistant body whose text equals a reply this
episode sampled (sampled text plus the end-of-turn text, as the tracker records it) with the sampled ids.
Texts stay as they are, so `concat(block.text) == text` and `concat(block.token_ids) == token_ids` still
hold. A reply cut by max_tokens was sampled without an end of turn, and the template closes the turn when
it is re-sent: it is fed as its sampled ids (a block that lines up with the earlier call's sampled block)
followed by the template's end-of-turn id in a glue block (`closed`), so the earlier call merges into the
later one. An assistant body with no sampled match (the client edited it) keeps the template's ids: the
fallback, counted.

Pure: the server passes the tracker's sampled replies and keeps the counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from engine.tracking.chat import RenderedPrompt
from engine.types import Author, Block, Timeline

__all__ = ["HistoryReuse", "reuse_sampled_ids", "sampled_replies"]


@dataclass(frozen=True)
class HistoryReuse:
    """What happened to the assistant turns of one prompt."""

    replaced: int = 0  # re-rendered ids differed from the sampled ones: now the sampled ids
    identical: int = 0  # the template's ids already were the sampled ones
    fallback: int = 0  # no sampled reply with this text: the template's ids are kept
    closed: int = 0  # a reply cut by max_tokens: its sampled ids, then the template's end of turn

    def __add__(self, other: HistoryReuse) -> HistoryReuse:
        return HistoryReuse(
            self.replaced + other.replaced,
            self.identical + other.identical,
            self.fallback + other.fallback,
            self.closed + other.closed,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "replaced": self.replaced,
            "identical": self.identical,
            "fallback": self.fallback,
            "closed": self.closed,
        }


def sampled_replies(timelines: Sequence[Timeline]) -> dict[str, list[int]]:
    """Text -> sampled ids of every reply recorded so far (the latest wins when two replies share a text)."""
    out: dict[str, list[int]] = {}
    for tl in timelines:
        for b in tl.blocks:
            if b.trainable and b.author is Author.LLM and b.token_ids:
                out[b.text] = list(b.token_ids)
    return out


def _cut_reply_blocks(body: Block, sampled: Mapping[str, list[int]], end_of_turn: Mapping[int, str]) -> list[Block] | None:
    """The blocks to feed for a re-sent reply that was cut by max_tokens, or None when `body` is not one.

    The template rendered the reply's text and closed the turn; the sampled reply has that text without the
    closing and ended on no end-of-turn id. Two blocks: the reply as sampled (it lines up with the earlier
    call's sampled block, so both merge modes fold that call in), then the template's closing as glue.
    """
    if not body.token_ids:
        return None
    eot = body.token_ids[-1]
    eot_text = end_of_turn.get(eot)
    if not eot_text or not body.text.endswith(eot_text):
        return None
    text = body.text[: -len(eot_text)]
    ids = sampled.get(text)
    if ids is None or (ids and ids[-1] in end_of_turn):
        return None
    return [Block(body.author, text, list(ids), None, False), Block(Author.ENV, eot_text, [eot], None, False)]


def reuse_sampled_ids(
    rendered: RenderedPrompt, sampled: Mapping[str, list[int]]
) -> tuple[RenderedPrompt, HistoryReuse]:
    """The prompt with each re-rendered assistant body that matches a sampled reply fed as its sampled ids."""
    blocks: list[Block] = []
    counts = HistoryReuse()
    changed = False
    for b in rendered.blocks:
        if b.author is not Author.LLM or b.trainable:
            blocks.append(b)
            continue
        ids = sampled.get(b.text)
        cut = _cut_reply_blocks(b, sampled, rendered.end_of_turn) if ids is None else None
        if cut is not None:
            counts += HistoryReuse(closed=1)
            blocks.extend(cut)
            changed = True
        elif ids is None:
            counts += HistoryReuse(fallback=1)
            blocks.append(b)
        elif ids == b.token_ids:
            counts += HistoryReuse(identical=1)
            blocks.append(b)
        else:
            counts += HistoryReuse(replaced=1)
            blocks.append(Block(b.author, b.text, list(ids), None, False))
            changed = True
    if not changed:
        return rendered, counts
    token_ids = [t for b in blocks for t in b.token_ids]
    return replace(rendered, token_ids=token_ids, blocks=blocks), counts
