"""Pooled samples <-> verl's batch layout: hand-computed tensors (no verl) and the DataProto round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.backends.verl.dataproto import pack_samples, unpack_samples
from engine.types import Author, Block, Sample, Timeline

PAD = 0


def _sample(blocks: list[tuple[str, list[int], list[float] | None]], **kw) -> Sample:
    """blocks: (author, ids, logprobs); LLM blocks with logprobs are trainable."""
    bs = [Block(Author(a), "", ids, lps, trainable=a == "llm" and lps is not None) for a, ids, lps in blocks]
    return Sample(timeline=Timeline(bs), **kw)


@pytest.fixture
def samples() -> list[Sample]:
    # Row 0: prompt 3 tokens, answer 2 tokens.
    s0 = _sample([("env", [5, 6, 7], None), ("llm", [8, 9], [-0.5, -0.25])],
                 episode_id="e0", task_id="t0", reward=1.0, weight=1.0, advantage=0.75)  # fmt: skip
    # Row 1: prompt 1 token, multi-turn: answer, tool result (context), answer.
    s1 = _sample([("env", [4], None), ("llm", [10], [-1.0]), ("env", [11, 12], None), ("llm", [13], [-2.0])],
                 episode_id="e1", task_id="t0", reward=0.0, weight=0.5, advantage=-0.75)  # fmt: skip
    return [s0, s1]


def test_pack_lays_samples_out_as_verl_does(samples):
    t, nt = pack_samples(samples, PAD)
    # P = 3 (row 0's prompt), R = 4 (row 1's response: 10, 11, 12, 13)
    assert t["prompts"].tolist() == [[5, 6, 7], [PAD, PAD, 4]]  # left-padded
    assert t["responses"].tolist() == [[8, 9, PAD, PAD], [10, 11, 12, 13]]  # right-padded
    assert t["input_ids"].tolist() == [[5, 6, 7, 8, 9, PAD, PAD], [PAD, PAD, 4, 10, 11, 12, 13]]
    assert t["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1]]
    assert t["position_ids"].tolist() == [[0, 1, 2, 3, 4, 4, 4], [0, 0, 0, 1, 2, 3, 4]]
    assert t["response_mask"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 1]]  # tool tokens carry no loss
    assert t["old_log_probs"].tolist() == [[-0.5, -0.25, 0, 0], [-1.0, 0, 0, -2.0]]
    assert t["advantages"].tolist() == [[0.75, 0.75, 0, 0], [-0.75, 0, 0, -0.75]]
    assert t["rollout_is_weights"].tolist() == [[1, 1, 0, 0], [0.5, 0, 0, 0.5]]
    assert t["token_level_rewards"].tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]  # on the last real token
    assert nt["uid"].tolist() == ["t0", "t0"] and nt["episode_id"].tolist() == ["e0", "e1"]
    assert all(v.shape[0] == 2 for v in t.values())


def test_unpack_restores_every_sample_field_but_block_text(samples):
    back = unpack_samples(*pack_samples(samples, PAD))
    for a, b in zip(samples, back, strict=True):
        assert b.timeline.token_ids == a.timeline.token_ids
        assert b.timeline.loss_mask == a.timeline.loss_mask
        assert b.timeline.logprobs == a.timeline.logprobs
        assert (b.advantage, b.weight, b.reward, b.task_id, b.episode_id) == (
            a.advantage, a.weight, a.reward, a.task_id, a.episode_id,
        )  # fmt: skip
    assert [blk.author for blk in back[1].timeline.blocks] == [Author.ENV, Author.LLM, Author.ENV, Author.LLM]


def test_pack_refuses_a_batch_without_anything_to_learn():
    only_prompt = _sample([("env", [1, 2], None)], episode_id="e", task_id="t", reward=0.0, weight=1.0)
    with pytest.raises(ValueError, match="no sample has a trainable token"):
        pack_samples([only_prompt], PAD)
    with pytest.raises(ValueError, match="at least one row"):
        pack_samples([], PAD)


def test_dataproto_round_trip(samples):
    pytest.importorskip("verl", reason="verl pins transformers<5.11; make test runs these in the verl venv")
    from verl import DataProto

    from engine.backends.verl.dataproto import from_dataproto, to_dataproto

    dp = to_dataproto(samples, PAD)
    assert isinstance(dp, DataProto) and len(dp) == 2
    tensors, _ = pack_samples(samples, PAD)
    for k, v in tensors.items():
        assert torch.equal(dp.batch[k], v), k
    assert isinstance(dp.non_tensor_batch["uid"], np.ndarray)
    # verl's own batch operations keep the layout: split in two and concatenated back.
    dp = DataProto.concat(dp.chunk(2))
    back = from_dataproto(dp)
    assert [s.timeline.token_ids for s in back] == [s.timeline.token_ids for s in samples]
    assert [s.timeline.loss_mask for s in back] == [s.timeline.loss_mask for s in samples]
    assert [s.timeline.logprobs for s in back] == [s.timeline.logprobs for s in samples]
    assert [(s.advantage, s.weight, s.reward, s.task_id) for s in back] == [
        (s.advantage, s.weight, s.reward, s.task_id) for s in samples
    ]
