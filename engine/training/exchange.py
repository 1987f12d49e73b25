"""Tokenizer-neutral sample exchange between the servers of a collaboration group (specs/hacpo.md, step 4
and step 6).

An agent j exports each of its finished episodes as a `SharedSample`: the request messages, the reply
text, the reward, `source = j`, `length = L_j` (reply tokens in j's tokenisation, end-of-turn excluded)
and `mean_logprob = lp_j = (1/L_j) sum_t log pi_old^j(y_t)` (sampling-time log-probs: the sampler is the
pre-step snapshot). A learner k imports it as a *cross* episode: the prompt rendered by k's own chat
template, the reply re-tokenised with `tokenizer(text, add_special_tokens=False)` (no end-of-turn token:
lp_j excludes it too), truncated to the context cap; an empty re-tokenisation is dropped.

Single-turn: the exchanged reply is the episode's last call's sampled reply. Multi-turn episodes are not
exchanged whole (HACPO is defined on prompt/response pairs).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.tracking.chat import render_prompt
from engine.types import Author, Block, EpisodeResult, Timeline

SOURCE_KEY = "source"  # metadata of an imported (cross) episode: the generating agent
LP_SRC_KEY = "lp_src"  # ... its mean old log-prob under the source's tokenisation
SRC_LEN_KEY = "src_len"  # ... L_j
TRUNCATED_KEY = "truncated"  # ... re-tokenisation cut at the context cap


class SharedSample(BaseModel):
    """One response as every agent of a group can read it, whatever its tokenizer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(..., min_length=1, max_length=64, description="The agent that generated it.")
    episode_id: str = Field(..., min_length=1, max_length=128)
    task_id: str = Field(..., min_length=1, max_length=512, description="The prompt group (same on every agent).")
    messages: list[dict[str, Any]] = Field(..., min_length=1, description="The request that produced the reply.")
    text: str = Field(..., description="The reply, without its end-of-turn token.")
    reward: float = Field(..., allow_inf_nan=False)
    length: int = Field(..., ge=1, description="L_j: reply tokens in the source's tokenisation, end-of-turn excluded.")
    mean_logprob: float = Field(..., allow_inf_nan=False, le=0, description="lp_j: mean sampling log-prob per token.")


def is_cross(ep: EpisodeResult) -> bool:
    return SOURCE_KEY in ep.metadata


def source_of(ep: EpisodeResult, own: str) -> str:
    return ep.metadata.get(SOURCE_KEY, own)


def export_sample(ep: EpisodeResult, source: str, tokenizer: Any, stop_ids: Collection[int]) -> SharedSample | None:
    """The shared form of an own episode, or None when it has nothing to share (no reply, no messages)."""
    if is_cross(ep) or ep.prompt_messages is None or not ep.timelines:
        return None
    reply = next((b for b in reversed(ep.timelines[-1].blocks) if b.author is Author.LLM and b.trainable), None)
    if reply is None or reply.logprobs is None:
        return None
    ids, lps = list(reply.token_ids), list(reply.logprobs)
    while ids and ids[-1] in stop_ids:  # L_j and lp_j exclude the end-of-turn token
        ids.pop()
        lps.pop()
    if not ids:
        return None
    return SharedSample(
        source=source,
        episode_id=ep.episode_id,
        task_id=ep.task_id,
        messages=ep.prompt_messages,
        text=tokenizer.decode(ids, skip_special_tokens=True),
        reward=ep.reward,
        length=len(ids),
        mean_logprob=min(0.0, sum(lps) / len(lps)),
    )


def import_sample(
    sample: SharedSample, tokenizer: Any, end_of_turn_ids: Collection[int], max_tokens: int
) -> EpisodeResult | None:
    """Learner k's view of a peer's sample (a cross episode), or None when it re-tokenises to nothing."""
    rendered = render_prompt(tokenizer, sample.messages, None, end_of_turn_ids=end_of_turn_ids)
    reply_ids = list(tokenizer(sample.text, add_special_tokens=False)["input_ids"])
    room = max(0, max_tokens - len(rendered.token_ids))
    truncated = len(reply_ids) > room
    reply_ids = reply_ids[:room]
    if not reply_ids:
        return None
    reply = Block(Author.LLM, sample.text, reply_ids, [0.0] * len(reply_ids), True)
    return EpisodeResult(
        episode_id=cross_episode_id(sample),
        task_id=sample.task_id,
        client_id=f"peer:{sample.source}",
        reward=sample.reward,
        timelines=[Timeline([*rendered.blocks, reply])],
        metadata={
            SOURCE_KEY: sample.source,
            LP_SRC_KEY: sample.mean_logprob,
            SRC_LEN_KEY: sample.length,
            TRUNCATED_KEY: truncated,
        },
    )


def cross_episode_id(sample: SharedSample) -> str:
    """Stable id of a peer's sample on the learner: a repeated import is recognised and skipped."""
    return f"{sample.source}/{sample.episode_id}"
