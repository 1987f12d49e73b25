"""Timeline merging: collapse the prefix-sharing calls of an episode into few training samples.

Implemented (AgentJet, arXiv 2606.04484, section 3.4.2, Algorithm 1), as pure functions:
- `merge_timelines(timelines, mode)`: timelines are taken in call order (stable by `call_index`) and
  processed in reverse, latest first: survivor T_i tries to absorb every earlier, not yet absorbed T_j
  (j = i-1 down to 1). T_j is absorbed when T_i has at least as many blocks and, for every block k of
  T_j, `blocks_match(T_i[k], T_j[k])`. On absorption every *trainable* (sampled) block of T_j is copied
  into T_i at the same index - author LLM, trainable=True, its token ids, logprobs and text - so the
  survivor trains on the exact sampled tokens. Survivors are returned in their input order; inputs are
  never mutated.
- `episode_samples(episode, mode)`: merges an episode's timelines and gives each of the k surviving
  samples weight 1/k (episode-level loss weights: every episode counts equally however many calls it
  made). Survivors without any trainable token are dropped before weighting.

The matching rule (per aligned block pair, longer L[k] vs shorter S[k]):
- `token`: identical token ids. `text`: identical text, after an optional `normalize(text)`
  (e.g. `strip_reasoning`). `off`: nothing merges.
- Blocks sampled in BOTH timelines never match (even with equal tokens): a survivor can hold only one
  sampled sequence per block, so merging them would drop one (two choices of one call, or a retried call,
  stay separate samples). Hence merging never loses a sampled token.
- Authors are not compared: identical tokens at the same position of an identical prefix were sampled in
  that context, whatever the later call labelled them.
Why the last block of the shorter timeline (the sampled reply) lines up with the re-rendered assistant
message of the longer one: engine.tracking.chat starts an assistant body where the generation prompt ends
and ends it right after the first end-of-turn token, putting template glue before/after it in their own
ENV blocks; the tracker records the sampled reply (which includes the end-of-turn token the model sampled)
as one block after the prompt's generation-prompt block. With ChatML (SmolLM2), call 1 records
`... ENV(<|im_start|>assistant\\n) LLM(reply<|im_end|>)` and call 2 re-renders the same message as
`... ENV(<|im_start|>assistant\\n) LLM(reply<|im_end|>) ENV(\\n<|im_start|>user\\n) ...`, block for block.
Consequences: a reply the client edits never matches its re-rendering, nor does one whose tool calls the
server parsed from non-canonical text (`chat.format_tool_calls`), nor, without exact histories, a reply
cut by `max_tokens` (no end-of-turn token sampled; the template closes the turn): these stay separate
samples, which is always safe. On the server (engine.tracking.history, `episodes.exact_history`) a re-sent
reply is fed as the ids it sampled, so tokenizer drift (below) does not split calls, and a cut reply is fed
as its sampled ids in one block and the template's end of turn in the next, which lines up block for block.

Token vs text mode, and what text mode costs. Token mode only merges when the survivor literally contains
the sampled ids, so the merged sample is exactly what the model saw and produced (train/inference
consistent). Text mode also merges when a later call re-tokenises an earlier reply differently
(tokenizer drift: the sampler produced a non-canonical tokenisation, e.g. "Hel"+"lo" where the
tokenizer says "Hello"). The survivor's token ids for that block are then REPLACED by the sampled ones:
the earlier reply is trained on exactly what was sampled, but the survivor is a sequence no call fed the
model - every later call was conditioned on the re-tokenised version. The logprobs recorded for later
sampled blocks therefore belong to a slightly different context than the one the trainer recomputes,
which shows up as importance ratios away from 1 for those tokens (clipped by PPO-style losses; a bias,
not a crash). With `normalize=strip_reasoning`, text mode also merges templates that drop earlier
`<think>...</think>` from history (Qwen3-style); the replaced block then re-inserts the reasoning the
later calls never saw - a larger context mismatch, traded for fewer, longer samples (the paper's default).

Not implemented: absorbing a later, shorter timeline into an earlier longer one (the paper's order),
partial-block matches (a block matches whole or not at all).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

from engine.errors import ConfigError
from engine.types import Block, EpisodeResult, Sample, Timeline

__all__ = [
    "MergeMode",
    "MERGE_MODES",
    "blocks_match",
    "can_absorb",
    "merge_timelines",
    "episode_samples",
    "strip_reasoning",
]

MergeMode = Literal["token", "text", "off"]
MERGE_MODES: tuple[str, ...] = ("token", "text", "off")
Normalizer = Callable[[str], str]

_THINK_RE = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def strip_reasoning(text: str) -> str:
    """Text normaliser: remove `<think>...</think>` spans and the whitespace after them."""
    return _THINK_RE.sub("", text)


def _check_mode(mode: str) -> None:
    if mode not in MERGE_MODES:
        raise ConfigError(f"unknown merge mode {mode!r}; expected one of {', '.join(MERGE_MODES)}")


def blocks_match(longer: Block, shorter: Block, mode: MergeMode, normalize: Normalizer | None = None) -> bool:
    """Whether `shorter` (from the earlier timeline) matches `longer` at the same block index."""
    _check_mode(mode)
    if mode == "off" or (longer.trainable and shorter.trainable):
        return False
    if mode == "token":
        return longer.token_ids == shorter.token_ids
    if normalize is None:
        return longer.text == shorter.text
    return normalize(longer.text) == normalize(shorter.text)


def can_absorb(
    longer: Timeline, shorter: Timeline, mode: MergeMode, normalize: Normalizer | None = None
) -> bool:
    """Whether every block of `shorter` matches `longer`'s blocks as a prefix."""
    if len(longer.blocks) < len(shorter.blocks):
        return False
    return all(
        blocks_match(lb, sb, mode, normalize) for lb, sb in zip(longer.blocks, shorter.blocks, strict=False)
    )


def _copy_block(b: Block) -> Block:
    return Block(
        b.author, b.text, list(b.token_ids), None if b.logprobs is None else list(b.logprobs), b.trainable
    )


def _copy_timeline(t: Timeline) -> Timeline:
    return Timeline([_copy_block(b) for b in t.blocks], t.call_index)


def _absorb(survivor: Timeline, shorter: Timeline) -> None:
    for k, sb in enumerate(shorter.blocks):
        if sb.trainable and not survivor.blocks[k].trainable:
            survivor.blocks[k] = _copy_block(sb)


def merge_timelines(
    timelines: Sequence[Timeline], mode: MergeMode = "token", *, normalize: Normalizer | None = None
) -> list[Timeline]:
    """Merge prefix-sharing timelines (module docstring); returns new timelines, inputs untouched."""
    _check_mode(mode)
    work = [_copy_timeline(t) for t in timelines]
    if mode == "off":
        return work
    order = sorted(range(len(work)), key=lambda k: work[k].call_index)  # stable: choices keep their order
    absorbed: set[int] = set()
    for a in range(len(order) - 1, 0, -1):
        i = order[a]
        if i in absorbed:
            continue
        for b in range(a - 1, -1, -1):
            j = order[b]
            if j not in absorbed and can_absorb(work[i], work[j], mode, normalize):
                _absorb(work[i], work[j])
                absorbed.add(j)
    return [t for k, t in enumerate(work) if k not in absorbed]


def episode_samples(
    episode: EpisodeResult, mode: MergeMode = "token", *, normalize: Normalizer | None = None
) -> list[Sample]:
    """Merged, weighted training samples of one episode: k survivors with a trainable token, weight 1/k."""
    merged = [
        t
        for t in merge_timelines(episode.timelines, mode, normalize=normalize)
        if any(b.trainable for b in t.blocks)
    ]
    if not merged:
        return []
    weight = 1.0 / len(merged)
    return [Sample(t, episode.episode_id, episode.task_id, episode.reward, weight) for t in merged]
