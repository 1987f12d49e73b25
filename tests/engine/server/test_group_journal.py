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
    pool.mark_trained(batch, 1)
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


def _train_away(pool: SamplePool, task: str, n: int) -> None:
    """Pool and train `n` plain episodes: dead journal records that make a compaction due."""
    for k in range(n):
        pool.add(ep(f"{task}-{k}", task))
        batch = list(pool.groups[task])
        pool.take(batch)
        pool.mark_trained(batch, 1)


def test_compaction_keeps_every_group_a_restart_must_know(tmp_path):
    """A compaction (independent of checkpoints) rewrites the journal with `add`s of live episodes; it
    must also keep a group still in doubt (its prepared episodes), a committed group (its answer, its
    pooled episodes with their seqs) and an aborted one, or a restart loses them."""
    journal = tmp_path / "pool.journal.jsonl"
    pool = SamplePool(journal, compact_after=4)
    pool.prepare("grp-doubt00", ep("d1"))
    pool.prepare("grp-doubt00", ep("d2", "u"))
    pool.prepare("grp-commit0", ep("c1"))
    pool.prepare("grp-commit0", ep("c2", calls=False))
    pool.commit_group("grp-commit0")
    pool.abort_group("grp-abort00")
    c1_seq = pool.groups["t"][0].seq
    _train_away(pool, "gone", 6)
    ops = [line.split('"op": "')[1].split('"')[0] for line in journal.read_text().splitlines()]
    assert "commit" not in ops and "trained" not in ops[:-2] and ops[0] == "seq"  # it was compacted

    again = SamplePool(journal)
    assert again.group_table.in_doubt() == ["grp-doubt00"]
    assert sorted(e.episode_id for e in again.group_table.episodes("grp-doubt00")) == ["d1", "d2"]
    assert ids(again) == ["c1"] and again.groups["t"][0].seq == c1_seq
    # the committed group answers a repeated commit as before, and refuses a late prepare or an abort
    assert [(o.episode_id, o.accepted) for o in again.commit_group("grp-commit0")] == [
        ("c1", True),
        ("c2", False),
    ]
    with pytest.raises(GroupConflict, match="already committed"):
        again.prepare("grp-commit0", ep("late"))
    with pytest.raises(GroupConflict, match="committed"):
        again.abort_group("grp-commit0")
    with pytest.raises(GroupConflict, match="already aborted"):
        again.prepare("grp-abort00", ep("late"))
    # the group in doubt resolves after the restart; seqs stay unique; compaction goes on
    again.commit_group("grp-doubt00")
    _train_away(again, "more", 6)
    final = SamplePool(journal)
    assert ids(final) == ["c1", "d1", "d2"]
    seqs = [e.seq for g in final.groups.values() for e in g]
    assert len(set(seqs)) == 3 and min(seqs) == c1_seq
    assert final.group_table.state("grp-doubt00") is GroupState.COMMITTED and not final.group_table.in_doubt()


def test_a_decision_whose_write_failed_is_written_again_by_its_repeat(tmp_path, monkeypatch):
    """A commit record that could not be written fails the commit's future (the server answers 503); the
    client's repeat writes it again instead of confirming a decision that is not on disk, and a replay
    that meets the record twice commits the group once."""
    from engine.pool.journal import PoolJournal

    journal = tmp_path / "j.jsonl"
    pool = SamplePool(journal)
    pool.prepare("grp-retry00", ep("r1"))
    real = PoolJournal._append_line

    def disk_full(self, line: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(PoolJournal, "_append_line", disk_full)
    pool.commit_group("grp-retry00")
    assert isinstance(pool.decision_write("grp-retry00").exception(), OSError)
    monkeypatch.setattr(PoolJournal, "_append_line", real)
    pool.commit_group("grp-retry00")  # the repeat
    assert pool.decision_write("grp-retry00").exception() is None
    pool.commit_group("grp-retry00")  # a repeat of a durable decision writes nothing
    with open(journal, "a") as f:  # as if the failed write had landed after all: the record twice
        f.write('{"op": "commit", "group": "grp-retry00", "seqs": [1]}\n')
    assert sum('"commit"' in line for line in journal.read_text().splitlines()) == 2
    again = SamplePool(journal)
    assert ids(again) == ["r1"] and again.group_table.state("grp-retry00") is GroupState.COMMITTED


def test_a_record_whose_fsync_failed_is_cut_back_and_never_replayed(tmp_path, monkeypatch):
    """The line reached the file but its fsync failed: the caller was told it failed, so the file is cut
    back to the acknowledged records and a restart does not bring it back."""
    import os

    from engine.pool.journal import PoolJournal

    path = tmp_path / "j.jsonl"
    journal = PoolJournal(path)
    assert journal.append({"op": "a"}).exception() is None
    acknowledged = path.read_bytes()
    real_fsync = os.fsync
    calls = []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == 1:
            raise OSError("EIO")
        real_fsync(fd)

    monkeypatch.setattr("engine.pool.journal.os.fsync", failing_fsync)
    assert isinstance(journal.append({"op": "refused"}).exception(), OSError)
    monkeypatch.setattr("engine.pool.journal.os.fsync", real_fsync)
    assert path.read_bytes() == acknowledged
    assert journal.append({"op": "b"}).exception() is None
    assert PoolJournal(path).read() == [{"op": "a"}, {"op": "b"}]


@pytest.mark.parametrize("compact_after", [2048, 2])  # the trained step survives a compaction's rewrite too
def test_a_restart_before_the_last_trained_step_drops_what_later_weights_sampled(tmp_path, compact_after):
    """Checkpoints off: step 1 trained and consumed, then step 2's episodes pooled and a group in doubt,
    then a crash. A restart from the initial model (step 0) has not the weights that sampled them, so they
    go, durably, and the group is aborted (a late commit is refused); a restart at step 1 keeps them."""
    journal = tmp_path / "pool.journal.jsonl"
    pool = SamplePool(journal, compact_after=compact_after)
    for k in range(2):
        pool.add(ep(f"s1-{k}", task="s1"))
    batch = [e for g in pool.groups.values() for e in g]
    pool.take(batch)
    pool.mark_trained(batch, 1)
    pool.add(ep("s2-0", task="s2"))
    pool.prepare("grp-late000", ep("g-0"))
    pool.close()
    if compact_after == 2:
        assert '"op": "seq"' in journal.read_text().splitlines()[0]

    kept = SamplePool(journal)
    assert kept.trained_step == 1 and ids(kept) == ["s2-0"]
    assert kept.drop_stale(1) == 0 and ids(kept) == ["s2-0"] and kept.group_table.in_doubt() == ["grp-late000"]
    kept.close()

    restarted = SamplePool(journal)
    assert restarted.drop_stale(0) == 2 and restarted.stale_dropped == 2 and ids(restarted) == []
    with pytest.raises(GroupConflict):
        restarted.commit_group("grp-late000")
    restarted.close()
    again = SamplePool(journal)
    assert ids(again) == [] and again.group_table.state("grp-late000") is GroupState.ABORTED
    assert again.trained_step == 1 and again.drop_stale(0) == 0  # nothing left to drop
