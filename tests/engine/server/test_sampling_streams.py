"""The pieces of reproducible runs that are pure functions: call seeds, episode numbering, the order a
batch trains in, what a server reports it holds, and what a resumed job still has to run."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from engine.client.runner import ranks_within_task
from engine.config import SwarmConfig
from engine.jobs import TrainJob, held_episodes, step_episodes, step_rewards
from engine.pool.pool import SamplePool
from engine.server.core import training_order
from engine.server.streams import SEED_BITS, call_seed
from engine.tasks.base import Item
from engine.types import Author, Block, EpisodeResult, Timeline


def _ep(task: str, index: int | None, eid: str) -> EpisodeResult:
    tl = Timeline([Block(Author.LLM, "x", [1, 2], [-0.1, -0.2], True)])
    return EpisodeResult(eid, task, "c", 1.0, [tl], index=index)


def test_a_call_seed_is_the_blake2b_digest_of_run_seed_task_episode_and_call():
    by_hand = int.from_bytes(hashlib.blake2b(b"0\x1fs0:0:1+2\x1f0\x1f0", digest_size=8).digest(), "big") >> 1
    assert call_seed(0, "s0:0:1+2", 0, 0) == by_hand == 7154479875823647300
    seeds = {call_seed(r, t, i, c) for r in (0, 1) for t in ("a", "b") for i in (0, 1) for c in (0, 1)}
    assert len(seeds) == 16  # every component changes the stream
    assert all(0 <= s < 2**SEED_BITS for s in seeds)
    # the separator keeps ("a1", 2) and ("a", 12) apart
    assert call_seed(0, "a1", 2, 0) != call_seed(0, "a", 12, 0)


def test_episodes_are_numbered_within_their_task_in_item_order():
    assert ranks_within_task(["a", "b", "a", "a", "b"]) == [0, 0, 1, 2, 1]
    assert ranks_within_task([]) == []


def test_a_batch_trains_in_task_then_index_order_whatever_the_arrival():
    arrived = [_ep("t2", 1, "w"), _ep("t1", 1, "x"), _ep("t2", 0, "y"), _ep("t1", 0, "z")]
    for seq, e in enumerate(arrived, 1):
        e.seq = seq
    assert [e.episode_id for e in sorted(arrived, key=training_order)] == ["z", "x", "y", "w"]
    # without indices, arrival order within a task
    a, b = _ep("t", None, "a"), _ep("t", None, "b")
    a.seq, b.seq = 2, 1
    assert [e.episode_id for e in sorted([a, b], key=training_order)] == ["b", "a"]


def test_the_pool_reports_pooled_and_untrained_taken_episodes_and_replays_their_index(tmp_path):
    pool = SamplePool(tmp_path / "j.jsonl")
    eps = [_ep("s0:0", 0, "a"), _ep("s0:0", 1, "b"), _ep("s1:0", 0, "c")]
    for e in eps:
        pool.add(e)
    pool.take(eps[:2])  # a step is training on them: a restart would replay them, so they are held
    assert pool.held_indices() == {"s0:0": [0, 1], "s1:0": [0]}
    pool.close()
    replayed = SamplePool(tmp_path / "j.jsonl")
    assert replayed.held_indices() == {"s0:0": [0, 1], "s1:0": [0]}
    replayed.take(eps[:2])
    replayed.mark_trained(eps[:2], 1)  # checkpointed: no longer held
    assert replayed.held_indices() == {"s1:0": [0]}
    replayed.close()


def test_a_resumed_job_runs_only_the_episodes_its_server_does_not_hold():
    items = [Item("1+2", "q", "3"), Item("4+5", "q", "9")]
    episodes = step_episodes("arithmetic", items, step=4, N=2, mixed=False)
    assert [e[:2] for e in episodes] == [("s4:0:1+2", 0), ("s4:0:1+2", 1), ("s4:1:4+5", 0), ("s4:1:4+5", 1)]
    assert step_episodes("countdown", items[:1], 0, 1, mixed=True)[0][0] == "countdown:s0:0:1+2"
    held = held_episodes({"s4:0:1+2": [1, 0], "s4:1:4+5": [None], "s3:0:7+8": [0]})
    assert [e[:2] for e in episodes if e[:2] not in held] == [("s4:1:4+5", 0), ("s4:1:4+5", 1)]


def test_a_step_line_shows_the_batch_reward_the_server_trained_not_the_jobs_partial_mean():
    nan = float("nan")
    single = TrainJob.model_validate({"task": "arithmetic"})
    # every episode replayed by a restarted server: the job ran none, its own mean is NaN
    assert step_rewards(single, {"reward/trainer": 0.25, "reward_mean": 0.25}, {"arithmetic": nan}) == {"arithmetic": 0.25}
    assert step_rewards(single, {"reward/trainer": 0.5}, {"arithmetic": 1.0}) == {"arithmetic": 0.5}  # some replayed
    assert step_rewards(single, {}, {"arithmetic": 0.75}) == {"arithmetic": 0.75}  # a server without step metrics
    mix = TrainJob.model_validate({"mix": {"arithmetic": 0.5, "countdown": 0.5}})
    ran = {"arithmetic": nan, "countdown": 0.0}
    assert step_rewards(mix, {"reward/arithmetic": 0.5, "reward/countdown": 0.125}, ran) == {"arithmetic": 0.5, "countdown": 0.125}


def test_batch_invariant_decoding_is_refused_outside_the_torch_backend():
    assert SwarmConfig.model_validate({"inference": {"batch_invariant": True}}).inference.batch_invariant
    with pytest.raises(ValidationError, match="batch_invariant"):
        SwarmConfig.model_validate({"backend": "vllm", "inference": {"batch_invariant": True}})


def _reply(client, task: str, index: int) -> tuple[str, bool]:
    """One sampled call (temperature 1) of episode `index` of `task`: (reply, accepted at end)."""
    with client.episode(task, index=index) as ep:
        out = ep.openai(max_retries=0).chat.completions.create(
            model=ep.model, messages=[{"role": "user", "content": "count"}], max_tokens=8, temperature=1.0
        )
        return out.choices[0].message.content, ep.end(0.0).accepted


def test_an_episode_samples_the_same_reply_whatever_order_episodes_arrive_in(live_server):
    """Real server, tiny model: a reply depends on (run seed, task, index), not on when the episode came."""
    cfg = SwarmConfig(pool={"batch_size": 50, "group_size": 4}, model={"seed": 5})
    a, b = live_server(cfg), live_server(cfg)
    with a.client() as ca, b.client() as cb:
        forward = {i: _reply(ca, "t", i)[0] for i in range(3)}
        backward = {i: _reply(cb, "t", i)[0] for i in (2, 1, 0)}
        assert forward == backward
        assert len(set(forward.values())) == 3  # each index its own stream
        # The pool holds episode 0 of "t" already: the same episode run again is not trained twice.
        reply, accepted = _reply(ca, "t", 0)
        assert reply == forward[0] and not accepted
        assert ca.status()["pool"]["held"] == {"t": [0, 1, 2]}
