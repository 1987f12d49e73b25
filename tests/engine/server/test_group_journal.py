"""Two-phase commit bookkeeping in the pool's journal: what a restarted server makes of each group state."""

import pytest

from engine.errors import GroupConflict, GroupNotFound
from engine.pool.groups import GroupState
from engine.pool.pool import SamplePool
from engine.types import Author, Block, EpisodeResult, Timeline


def ep(eid: str, task: str = "t", calls: bool = True) -> EpisodeResult:
    tl = [Timeline([Block(Author.LLM, "x", [1, 2], [-0.1, -0.2], True)])] if calls else []
    return EpisodeResult(eid, task, "c", 1.0, tl)


def ids(pool: SamplePool) -> list[str]:
    return sorted(e.episode_id for g in pool.groups.values() for e in g)


def test_prepared_groups_stay_out_of_the_pool_and_in_doubt_across_a_restart(tmp_path):
    journal = tmp_path / "pool.journal.jsonl"
    pool = SamplePool(journal)
    pool.add(ep("plain"))
    pool.prepare("grp-doubt00", ep("d1"))
    pool.prepare("grp-commit0", ep("c1"))
    pool.prepare("grp-commit0", ep("c2", calls=False))  # no LLM call: answered, never pooled
    pool.prepare("grp-abort00", ep("a1"))
    outcomes = pool.commit_group("grp-commit0")
    assert [(o.episode_id, o.accepted) for o in outcomes] == [("c1", True), ("c2", False)]
    assert pool.abort_group("grp-abort00")
    assert ids(pool) == ["c1", "plain"]

    again = SamplePool(journal)  # a restart replays the journal
    assert ids(again) == ["c1", "plain"]
    assert again.group_table.in_doubt() == ["grp-doubt00"]
    assert again.group_table.state("grp-commit0") is GroupState.COMMITTED
    assert again.group_table.state("grp-abort00") is GroupState.ABORTED
    # the in-doubt group resolves after the restart, exactly once
    assert [o.episode_id for o in again.commit_group("grp-doubt00")] == ["d1"]
    assert [o.episode_id for o in again.commit_group("grp-doubt00")] == ["d1"]
    assert ids(again) == ["c1", "d1", "plain"]
    assert sorted(e.seq for g in again.groups.values() for e in g) == [1, 2, 3]  # unique seqs
    assert ids(SamplePool(journal)) == ["c1", "d1", "plain"]


def test_a_trained_committed_group_is_not_replayed(tmp_path):
    journal = tmp_path / "j.jsonl"
    pool = SamplePool(journal)
    pool.prepare("grp-trained", ep("x"))
    pool.commit_group("grp-trained")
    batch = [e for g in pool.groups.values() for e in g]
    pool.take(batch)
    pool.mark_trained(batch)
    assert ids(SamplePool(journal)) == []


def test_conflicting_resolutions_are_refused():
    pool = SamplePool()
    pool.prepare("grp-aaaaaaa", ep("x"))
    pool.commit_group("grp-aaaaaaa")
    with pytest.raises(GroupConflict, match="committed"):
        pool.abort_group("grp-aaaaaaa")
    with pytest.raises(GroupConflict, match="already committed"):
        pool.prepare("grp-aaaaaaa", ep("y"))
    assert pool.abort_group("grp-bbbbbbb")  # presumed abort of an unknown group ...
    with pytest.raises(GroupConflict, match="already aborted"):
        pool.prepare("grp-bbbbbbb", ep("z"))  # ... so a late prepare cannot revive it
    with pytest.raises(GroupConflict, match="aborted"):
        pool.commit_group("grp-bbbbbbb")
    with pytest.raises(GroupNotFound):
        pool.commit_group("grp-never00")
