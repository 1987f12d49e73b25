"""Pool trigger policies, per-policy, and the durable journal that survives a crash."""

import json

import pytest

from engine.config import SwarmConfig
from engine.errors import JournalCorrupt
from engine.pool.policies import select_batch
from engine.pool.pool import SamplePool
from engine.types import Author, Block, EpisodeResult, Timeline


def ep(task: str, reward: float, client: str = "c", eid: str | None = None) -> EpisodeResult:
    tl = Timeline([Block(Author.LLM, "x", [1, 2], [-0.1, -0.2], True)])
    return EpisodeResult(eid or f"{task}-{reward}", task, client, reward, [tl])


def filled(*eps: EpisodeResult) -> SamplePool:
    pool = SamplePool()
    for e in eps:
        pool.add(e)
    return pool


def test_episode_count_fires_at_b_times_n_oldest_first():
    pool = filled(*[ep(f"t{i}", 1.0, eid=f"e{i}") for i in range(5)])
    assert pool.select("episode_count", batch_size=3, group_size=2) is None
    pool.add(ep("t9", 0.0, eid="e5"))
    sel = pool.select("episode_count", batch_size=3, group_size=2)
    assert [e.episode_id for e in sel.batch] == ["e0", "e1", "e2", "e3", "e4", "e5"]


def test_task_count_needs_b_complete_groups_and_takes_first_n_each():
    pool = filled(ep("a", 1), ep("a", 0), ep("a", 1), ep("b", 1))
    assert pool.select("task_count", batch_size=2, group_size=2) is None
    pool.add(ep("b", 1, eid="b2"))
    sel = pool.select("task_count", batch_size=2, group_size=2)
    assert len(sel.batch) == 4
    assert sorted({e.task_id for e in sel.batch}) == ["a", "b"]
    # the third "a" episode is not part of the batch: each task contributes exactly N
    assert sum(e.task_id == "a" for e in sel.batch) == 2


def test_nondegenerate_drops_uniform_groups_and_waits_for_informative_ones():
    pool = filled(ep("same", 1), ep("same", 1, eid="s2"), ep("mixed", 1), ep("mixed", 0))
    sel = pool.select("nondegenerate_task_count", batch_size=2, group_size=2)
    assert sel is None  # only one informative task so far
    assert "same" not in pool.groups  # the uniform group was discarded rather than blocking the pool
    assert pool.discarded == 2
    pool.add(ep("other", 0.5))
    pool.add(ep("other", 0.0))
    sel = pool.select("nondegenerate_task_count", batch_size=2, group_size=2)
    assert sorted({e.task_id for e in sel.batch}) == ["mixed", "other"]


def test_all_clients_agree_waits_for_every_active_client():
    groups = {"a": [ep("a", 1)]}
    active = frozenset({"c1", "c2"})
    assert select_batch("all_clients_agree", groups, 1, 1, active, frozenset({"c1"})) is None
    assert select_batch("all_clients_agree", groups, 1, 1, active, frozenset({"c1", "c2"})) is not None


def test_any_client_agrees_fires_on_one_and_never_on_an_empty_pool():
    active = frozenset({"c1", "c2"})
    assert select_batch("any_client_agrees", {"a": [ep("a", 1)]}, 1, 1, active, frozenset({"c2"})) is not None
    assert select_batch("any_client_agrees", {}, 1, 1, active, frozenset({"c2"})) is None
    assert select_batch("any_client_agrees", {"a": [ep("a", 1)]}, 1, 1, active, frozenset()) is None


def test_journal_replays_accepted_but_untrained_episodes(tmp_path):
    j = tmp_path / "pool.journal.jsonl"
    pool = SamplePool(j)
    for i in range(4):
        pool.add(ep(f"t{i % 2}", float(i), eid=f"e{i}"))
    batch = pool.select("task_count", batch_size=1, group_size=2).batch
    pool.take(batch)
    pool.mark_trained(batch, 1)
    pool.add(ep("t5", 1.0, eid="late"))
    # crash: a torn final line from an append that never returned to the client
    with open(j, "a") as f:
        f.write('{"op": "add", "episode": {"seq": 99')
    replayed = SamplePool(j)
    ids = sorted(e.episode_id for g in replayed.groups.values() for e in g)
    assert ids == sorted({"e0", "e1", "e2", "e3", "late"} - {e.episode_id for e in batch})
    # sequence numbers keep increasing after a replay
    replayed.add(ep("t6", 0.0, eid="after"))
    assert replayed.groups["t6"][0].seq > max(e.seq for g in replayed.groups.values() for e in g if e.task_id != "t6")
    assert all(json.loads(line)["op"] in {"add", "trained"} for line in j.read_text().splitlines())
    # the torn tail was cut off at replay, not glued to the next append: a second restart keeps "after"
    again = SamplePool(j)
    assert sorted(e.episode_id for g in again.groups.values() for e in g) == sorted([*ids, "after"])


def test_a_damaged_line_before_the_end_is_an_error_not_a_silent_cut(tmp_path):
    j = tmp_path / "pool.journal.jsonl"
    pool = SamplePool(j)
    pool.add(ep("a", 1.0, eid="first"))
    with open(j, "a") as f:
        f.write("garbage\n")
    pool.add(ep("a", 0.0, eid="acknowledged-after-the-damage"))
    with pytest.raises(JournalCorrupt, match="line 2"):
        SamplePool(j)


def _ids(pool: SamplePool) -> list[str]:
    return sorted(e.episode_id for g in pool.groups.values() for e in g)


def test_the_journal_is_compacted_without_any_checkpoint(tmp_path):
    """Records of episodes gone for good are dropped once 3 pile up, whatever the checkpoint cadence;
    what a restart must bring back (pooled episodes and a taken batch whose step is not durable yet)
    survives every compaction, and sequence numbers never repeat."""
    j = tmp_path / "pool.journal.jsonl"
    pool = SamplePool(j, compact_after=3)
    pool.add(ep("lonely", 1.0, eid="lonely"))  # its group never completes: pooled throughout
    for step in range(40):
        for k in range(2):
            pool.add(ep(f"s{step}", float(k), eid=f"s{step}-{k}"))
        batch = pool.select("task_count", batch_size=1, group_size=2).batch
        pool.take(batch)
        if step != 38:  # step 38's batch is taken, its step not yet durable
            pool.mark_trained(batch, step + 1)
        assert len(j.read_text().splitlines()) <= 2 + 5 + 1  # dead records, live episodes, the seq header
    lines = j.read_text().splitlines()
    assert not any("s39" in line for line in lines)  # the last trained batch is compacted away too
    replayed = SamplePool(j)
    assert _ids(replayed) == ["lonely", "s38-0", "s38-1"]
    replayed.add(ep("new", 0.0, eid="new"))
    assert replayed.groups["new"][0].seq == 1 + 80 + 1  # numbering continues after every episode issued


def test_a_trained_batch_leaves_the_journal_when_checkpoints_are_off(live_server, tmp_path):
    """checkpoint_every 0: weights are never durable, so a batch is consumed once trained; otherwise every
    episode ever accepted would stay in the journal and be replayed into the next start."""
    run_dir = tmp_path / "run"
    cfg = SwarmConfig(
        run_dir=str(run_dir),
        pool={"policy": "episode_count", "batch_size": 1, "group_size": 2},
        training={"checkpoint_every": 0},
    )
    srv = live_server(cfg)
    with srv.client() as c:
        for reward in (0.0, 1.0, 0.5):  # two make the batch, the third stays pooled
            with c.episode("t") as e:
                e.openai().chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
                assert e.end(reward).accepted
        c.wait_for_step(1, timeout=120)
        assert not (run_dir / "checkpoints").exists()
    replayed = SamplePool(run_dir / "pool.journal.jsonl")
    assert [e.reward for g in replayed.groups.values() for e in g] == [0.5]


def test_taken_batch_is_restored_in_arrival_order_when_a_step_fails():
    pool = filled(ep("a", 1, eid="a1"), ep("a", 0, eid="a2"), ep("a", 1, eid="a3"))
    batch = pool.select("task_count", 1, 2).batch
    pool.take(batch)
    assert [e.episode_id for e in pool.groups["a"]] == ["a3"]
    pool.restore(batch)
    assert [e.episode_id for e in pool.groups["a"]] == ["a1", "a2", "a3"]
