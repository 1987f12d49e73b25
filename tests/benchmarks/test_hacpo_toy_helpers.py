"""Pure helpers of benchmarks/hacpo_toy.py: paired bootstrap, the ordering (ties stay ties), the gold
SFT episode, and the job each method runs (same seed, same agents, only the method differs)."""

from __future__ import annotations

import argparse

import pytest
from tests_support import load_benchmark

ht = load_benchmark("hacpo_toy")


def test_paired_bootstrap_interval_brackets_the_mean_and_collapses_for_equal_pairs():
    mean, lo, hi = ht.paired_bootstrap([0.1, 0.2, 0.3, 0.0, 0.4], n=2000)
    assert mean == pytest.approx(0.2) and 0.0 <= lo < mean < hi <= 0.4
    assert ht.paired_bootstrap([0.05] * 3, n=100) == pytest.approx((0.05, 0.05, 0.05))


def test_ordering_writes_ties_as_ties():
    assert ht.ordering({"gspo": 0.5, "hacpo": 0.6, "naive": 0.5}) == "hacpo (0.600) > gspo (0.500) = naive (0.500)"


def test_gold_episode_trains_only_the_answer_and_its_end_of_turn():
    from engine.models.builtins import byte_tokenizer
    from engine.tasks.base import Item

    tok = byte_tokenizer()
    ep = ht.gold_episode(tok, Item("3-1", "What is 3 - 1?", 2), [tok.eos_token_id])
    reply = ep.timelines[0].blocks[-1]
    assert reply.trainable and reply.token_ids == tok("2", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert not any(b.trainable for b in ep.timelines[0].blocks[:-1])


def test_every_method_runs_the_same_pair_on_the_same_prompts():
    args = argparse.Namespace(eval_size=4, max_tokens=8, batch=2, group=2, steps=1, mini_batch=4, eps_low=3e-3, eps_high=4e-3)
    agents = {"smol": {"model": {"name": "tiny"}}, "bytes": {"model": {"name": "tiny-bytes"}}}
    jobs = {m: ht.job_for(1, m, agents, args) for m in ht.METHODS}
    assert {j.seed for j in jobs.values()} == {1} and {j.task for j in jobs.values()} == {"arithmetic_pm"}
    assert {m: j.team.method.value for m, j in jobs.items()} == {m: m for m in ht.METHODS}
    assert jobs["hacpo"].team.hacpo.eps_low == 3e-3
