"""The supervised warm start (engine.training.supervised): the gold episode trains exactly the answer and
its end-of-turn token, and `supervise` lowers the nll, saves a folder a job can load, and reuses it."""

from __future__ import annotations

import json

import pytest
import torch

from engine.config import ModelConfig
from engine.models import load_model
from engine.models.builtins import byte_tokenizer
from engine.training.supervised import SUMMARY_FILE, gold_episode, supervise


def test_gold_episode_trains_only_the_answer_and_its_end_of_turn():
    tok = byte_tokenizer()
    ep = gold_episode(tok, "3-1", "What is 3 - 1?", "2", [tok.eos_token_id])
    reply = ep.timelines[0].blocks[-1]
    assert reply.trainable and reply.token_ids == tok("2", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert not any(b.trainable for b in ep.timelines[0].blocks[:-1])
    assert ep.task_id == "3-1" and ep.episode_id == "sft-3-1"


def test_supervise_lowers_the_nll_and_saves_a_loadable_model(tmp_path):
    pairs = [(f"q{i}", f"Say {w}.", w) for i, w in enumerate(["yes", "no", "maybe", "ok"])]
    out = tmp_path / "warm"
    summary = supervise(ModelConfig(name="tiny"), pairs, out, steps=6, batch=4, lr=3e-3, seed=0)
    assert summary["nll_last"] < summary["nll_first"]  # the same 4 answers, 6 times: it must memorise
    assert json.loads((out / SUMMARY_FILE).read_text()) == summary
    loaded = load_model(ModelConfig(name=str(out)))
    base = load_model(ModelConfig(name="tiny", seed=0))
    changed = any(
        not torch.equal(a, b) for a, b in zip(loaded.model.parameters(), base.model.parameters(), strict=True)
    )
    assert changed
    # a finished folder is reused, not trained again
    assert supervise(ModelConfig(name="tiny"), pairs, out, steps=6, batch=4, lr=3e-3, seed=0) == summary
    with pytest.raises(ValueError, match="at least one"):
        supervise(ModelConfig(name="tiny"), [], tmp_path / "none", steps=1)
