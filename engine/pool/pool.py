"""The sample pool: finished training episodes grouped by task, with an optional durable journal.

The pool is owned by the server's event loop (no locks): its memory changes synchronously, in the loop,
and the journal's file work (`engine.pool.journal`) runs on a writer thread in the same order. With a
journal path, every accepted episode's `add` record is fsynced *before* the client is told it was
accepted (the server awaits the future `add` returns), and every batch taken for training is logged as
consumed once its step is checkpointed, so a crashed server can rebuild exactly the episodes that were
accepted but not yet trained on.

Journal records, one JSON object per line: `add` (an accepted episode), `trained` and `discard` (seqs
that left for good; `trained` also names its step), `prepare`, `commit` and `abort` (episode groups,
below), and, written only by a compaction, `seq` (the next sequence number and the last trained step,
first) and `group` (a decided group).

Stale episodes. An episode waiting in the pool was sampled by the weights of the last trained step (or
later ones). A restart that resumes from an earlier step (checkpoints off, so it begins from the initial
model; a checkpoint lost) cannot reproduce those weights: training on their episodes would mix another
run's policy into this one (off-policy samples whose recorded log-probs no longer match, and a rerun that
differs from an uninterrupted one). `drop_stale(step)` discards them, and aborts groups still in doubt,
when the journal's last trained step is past the step the model resumes from.

Episode groups (two-phase commit, see engine.pool.groups) journal `prepare` (the finished episode, outside
the pool), then `commit` (the seqs it takes in the pool) or `abort`; a replay restores prepared groups as
still in doubt, committed ones into the pool and aborted ones nowhere. Like `add`, `prepare`,
`commit_group` and `abort_group` change memory at once and write their record on the writer thread: the
server answers only once it is durable (the future `prepare` returns, `decision_write` for a commit or
abort), so a group is never reported prepared, committed or aborted before that is on disk. A repeated
commit or abort writes nothing and waits for the first one's write (or writes the record again when that
write failed; replay skips a repeated decision), so a retry is never answered before the decision is
durable either.

Compaction: records of episodes that left the pool are dead weight, and a long run would grow the journal
without bound. Once `compact_after` of them accumulate, the journal is rewritten (to a temporary file,
then atomically renamed) with one `add` per episode that may still be replayed: pooled ones, and ones
taken for training whose step is not checkpointed yet (committed groups' episodes and peers' imported
samples among them, with their seqs), one `prepare` per episode of a group still in doubt, and one
`group` record per decided group (its state and members' outcomes, without the episodes), so a restart
still holds undecided groups in doubt and answers a repeated commit or abort as before, and a late
prepare of a decided group is still refused. This does not depend on checkpoints happening.
Because writes keep their submission order, a compaction snapshot taken in the loop already holds every
episode whose `add` was submitted before it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import Future
from pathlib import Path

from engine.pool.groups import GroupState, GroupTable, MemberOutcome
from engine.pool.journal import PoolJournal
from engine.pool.policies import Selection, select_batch
from engine.types import EpisodeResult

# Dead journal records that trigger a compaction: rare enough that rewriting the live episodes costs
# little per append, small enough that the file stays within a few thousand lines.
COMPACT_AFTER_RECORDS = 2048

log = logging.getLogger("swarm.pool")


class SamplePool:
    """Finished training episodes by task, in arrival order, optionally journaled (module docstring).

    `background=True` moves the journal's file work onto its writer thread (the server's choice); the
    methods that write return the write's future either way.
    """

    def __init__(
        self, journal: Path | None = None, compact_after: int = COMPACT_AFTER_RECORDS, background: bool = False
    ) -> None:
        self._groups: dict[str, list[EpisodeResult]] = defaultdict(list)
        # Taken for training but not yet marked trained: the journal must keep replaying them.
        self._taken: dict[int, EpisodeResult] = {}
        self._next_seq = 1
        self._journal = PoolJournal(journal, background) if journal is not None else None
        self._compact_after = compact_after
        self._records = 0  # episode and group records in the journal file (all lines but the `seq` header)
        self._last_write: Future[None] = _done()
        self.discarded = 0
        self.trained_step = 0  # the last step whose batch is durably consumed (`mark_trained`)
        self.stale_dropped = 0  # episodes `drop_stale` discarded
        self.group_table = GroupTable()
        # The record and write of each group's deciding commit/abort, for repeats (pruned once durable).
        self._decisions: dict[str, tuple[dict, Future[None]]] = {}
        if self._journal is not None:
            self._replay(self._journal)
            self._maybe_compact()

    # -- contents -------------------------------------------------------------------------------
    def add(self, episode: EpisodeResult) -> Future[None]:
        """Accept a finished episode; the future completes once it is durable (at once without a journal).

        The episode is in the pool from this call on; if the future fails, `withdraw` it.
        """
        episode.seq = self._next_seq
        self._next_seq += 1
        self._groups[episode.task_id].append(episode)
        written = self._append({"op": "add", "episode": episode.to_dict()})
        self._maybe_compact()
        return written

    def withdraw(self, episode: EpisodeResult) -> bool:
        """Take back an episode whose `add` could not be journaled; False if a batch already took it."""
        if not any(e.seq == episode.seq for e in self._groups.get(episode.task_id, ())):
            return False
        self._remove([episode], op=None)
        return True

    # -- episode groups (two-phase commit) -----------------------------------------------------
    def prepare(self, group_id: str, episode: EpisodeResult) -> Future[None]:
        """Hold a finished episode for `group_id`, not in the pool yet; the future completes once durable.

        If the future fails, `unprepare` the episode.
        """
        self.group_table.check_prepare(group_id)
        self.group_table.prepare(group_id, episode)
        written = self._append({"op": "prepare", "group": group_id, "episode": episode.to_dict()})
        self._maybe_compact()
        return written

    def unprepare(self, group_id: str, episode: EpisodeResult) -> bool:
        """Take back a prepared episode whose record could not be journaled; False if its group was decided."""
        return self.group_table.unprepare(group_id, episode.episode_id)

    def commit_group(self, group_id: str) -> list[MemberOutcome]:
        """Move a prepared group's episodes into the pool (idempotent); returns what each member became.

        Episodes without any LLM call are not pooled (nothing to train on); their ids are still answered.
        Answer only once `decision_write(group_id)` is done.
        """
        if self.group_table.check_commit(group_id):
            trainable = [e for e in self.group_table.episodes(group_id) if e.timelines]
            seqs = list(range(self._next_seq, self._next_seq + len(trainable)))
            for ep in self._number_committed(group_id, seqs):
                self._groups[ep.task_id].append(ep)
            # One record decides the whole group on this server.
            self._decide(group_id, {"op": "commit", "group": group_id, "seqs": seqs})
        else:
            self._redecide_failed(group_id)
        return self.group_table.outcomes(group_id)

    def abort_group(self, group_id: str) -> bool:
        """Drop a group's prepared episodes (idempotent; an unknown group is recorded as aborted, so a
        late prepare of it is refused). True when this call aborted it. Answer only once
        `decision_write(group_id)` is done."""
        if not self.group_table.check_abort(group_id):
            self._redecide_failed(group_id)
            return False
        self.group_table.resolve(group_id, GroupState.ABORTED)
        self._decide(group_id, {"op": "abort", "group": group_id})
        return True

    def decision_write(self, group_id: str) -> Future[None]:
        """The write of the record that decided `group_id` (commit or abort); done once it is durable."""
        pending = self._decisions.get(group_id)
        return _done() if pending is None else pending[1]

    def _number_committed(self, group_id: str, seqs: list[int]) -> list[EpisodeResult]:
        """Mark a group committed and give its trainable episodes their pool seqs; returns them."""
        trainable = [e for e in self.group_table.episodes(group_id) if e.timelines]
        for ep, seq in zip(trainable, seqs, strict=True):
            ep.seq = seq
        self._next_seq = max([self._next_seq, *(s + 1 for s in seqs)])
        self.group_table.resolve(group_id, GroupState.COMMITTED)
        return trainable

    def _decide(self, group_id: str, record: dict) -> None:
        written = self._append(record)
        # Forget decisions that are durable: their repeats need not wait for anything.
        for g in [g for g, (_, f) in self._decisions.items() if f.done() and f.exception() is None]:
            del self._decisions[g]
        self._decisions[group_id] = (record, written)
        self._maybe_compact()

    def _redecide_failed(self, group_id: str) -> None:
        """A repeated decision: write it again if the first write failed (else it waits for that one)."""
        pending = self._decisions.get(group_id)
        if pending is not None and pending[1].done() and pending[1].exception() is not None:
            # Replay skips a repeated decision, so writing it again is safe even if the first one landed.
            self._decide(group_id, pending[0])

    def __len__(self) -> int:
        return sum(len(g) for g in self._groups.values())

    @property
    def groups(self) -> dict[str, list[EpisodeResult]]:
        return self._groups

    def holds(self, task_id: str, index: int) -> bool:
        """Whether episode `index` of `task_id` is held (pooled, or in a step not checkpointed yet)."""
        return any(e.index == index for e in self._groups.get(task_id, ())) or any(
            e.task_id == task_id and e.index == index for e in self._taken.values()
        )

    def held_indices(self) -> dict[str, list[int | None]]:
        """Episode indices by task of every episode that will still train: pooled, or taken by a step
        whose checkpoint is not written yet (a restart replays those). A resumed client skips them."""
        held: dict[str, list[int | None]] = defaultdict(list)
        for e in sorted([*(e for g in self._groups.values() for e in g), *self._taken.values()], key=lambda e: e.seq):
            held[e.task_id].append(e.index)
        return dict(held)

    def episodes_by_client(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for g in self._groups.values():
            for e in g:
                counts[e.client_id] += 1
        return dict(counts)

    # -- batching -------------------------------------------------------------------------------
    def select(self, policy: str, batch_size: int, group_size: int, **clients: frozenset[str]) -> Selection | None:
        """Ask the policy for a batch; discarded degenerate groups leave the pool immediately."""
        sel = select_batch(policy, self._groups, batch_size, group_size, **clients)
        if sel is not None and sel.discard:
            self._remove(sel.discard, op="discard")
            self.discarded += len(sel.discard)
        if sel is None or not sel.batch:
            return None
        return sel

    def take(self, batch: list[EpisodeResult]) -> None:
        """Remove a batch from the pool (in memory only; the journal records it at `mark_trained`)."""
        self._remove(batch, op=None)
        self._taken.update((e.seq, e) for e in batch)

    def mark_stepped(self, step: int, batch: list[EpisodeResult]) -> Future[None]:
        """Record that `batch` trained step `step`, durable or not yet (`mark_trained` says when it is).

        Replay ignores it (a batch not yet checkpointed must come back after a crash); it is history
        for `swarm audit`, which would otherwise not see a step no checkpoint holds yet (under a time
        basis, every step after the last write). A restart that retrains step k writes k again."""
        written = self._append({"op": "stepped", "step": step, "seqs": [e.seq for e in batch]})
        written.add_done_callback(_log_failure)
        return written

    def mark_trained(self, batch: list[EpisodeResult], step: int) -> Future[None]:
        """Record durably that a batch's step is checkpointed (or, checkpoints off, consumed) through
        `step`; those episodes will not be replayed."""
        for e in batch:
            self._taken.pop(e.seq, None)
        self.trained_step = max(self.trained_step, step)
        written = self._append({"op": "trained", "seqs": [e.seq for e in batch], "step": step})
        written.add_done_callback(_log_failure)
        self._maybe_compact()
        return written

    def drop_stale(self, resume_step: int) -> int:
        """Discard what a restart at `resume_step` cannot train on (module docstring, "Stale episodes"):
        every pooled episode, and every group in doubt (aborted, so a late commit is refused), when the
        journal's last trained step is past `resume_step`. Returns the episodes discarded."""
        if self.trained_step <= resume_step:
            return 0
        pooled = [e for g in self._groups.values() for e in g]
        if pooled:
            self._remove(pooled, op="discard")
        doubtful = self.group_table.in_doubt()
        dropped = len(pooled) + sum(len(self.group_table.episodes(g)) for g in doubtful)
        for g in doubtful:
            self.abort_group(g)
        self.stale_dropped += dropped
        return dropped

    def restore(self, batch: list[EpisodeResult]) -> None:
        """Put a batch back (its training step failed), keeping arrival order."""
        for e in batch:
            self._taken.pop(e.seq, None)
            self._groups[e.task_id].append(e)
            self._groups[e.task_id].sort(key=lambda x: x.seq)

    def close(self) -> None:
        """Wait for the journal's pending writes and stop its writer (blocking)."""
        if self._journal is not None:
            self._journal.close()

    # -- journal --------------------------------------------------------------------------------
    def _remove(self, episodes: list[EpisodeResult], op: str | None) -> None:
        seqs = {e.seq for e in episodes}
        for task in list(self._groups):
            kept = [e for e in self._groups[task] if e.seq not in seqs]
            if kept:
                self._groups[task] = kept
            else:
                del self._groups[task]
        if op is not None:
            self._append({"op": op, "seqs": sorted(seqs)}).add_done_callback(_log_failure)
            self._maybe_compact()

    def _append(self, record: dict) -> Future[None]:
        if self._journal is None:
            return _done()
        self._records += 1
        self._last_write = self._journal.append(record)
        return self._last_write

    def last_write(self) -> Future[None]:
        """The latest record appended: once it is written, so is every earlier one (writes run in order).

        A failed compaction is not one of them: it loses nothing (the journal it would replace stays)."""
        return self._last_write

    def _maybe_compact(self) -> None:
        """Rewrite the journal once its dead records reach the threshold (module docstring: what stays)."""
        if self._journal is None:
            return
        decided = self.group_table.decided()
        in_doubt = [(g, e) for g in self.group_table.in_doubt() for e in self.group_table.episodes(g)]
        live = len(self) + len(self._taken) + len(decided) + len(in_doubt)
        if self._records - live < self._compact_after:
            return
        pooled = [e for g in self._groups.values() for e in g]
        episodes = sorted([*pooled, *self._taken.values()], key=lambda e: e.seq)
        records: list[dict] = [{"op": "seq", "next": self._next_seq, "trained_step": self.trained_step}]
        records += [
            {"op": "group", "group": g, "state": state.value, "outcomes": [[m.episode_id, m.accepted, m.reason] for m in outcomes]}
            for g, state, outcomes in decided
        ]
        records += [{"op": "prepare", "group": g, "episode": e.to_dict()} for g, e in in_doubt]
        records += [{"op": "add", "episode": e.to_dict()} for e in episodes]
        self._journal.rewrite(records).add_done_callback(_log_failure)
        self._records = len(records) - 1

    def _replay(self, journal: PoolJournal) -> None:
        live: dict[int, EpisodeResult] = {}
        for lineno, rec in enumerate(journal.read(), 1):
            try:
                op = rec["op"]
                if op == "add":
                    ep = EpisodeResult.from_dict(rec["episode"])
                    live[ep.seq] = ep
                    self._next_seq = max(self._next_seq, ep.seq + 1)
                elif op in ("trained", "discard"):
                    for s in rec["seqs"]:
                        live.pop(s, None)
                    if op == "trained" and "step" in rec:  # journals written before steps were recorded: none
                        self.trained_step = max(self.trained_step, int(rec["step"]))
                elif op == "prepare":
                    self.group_table.prepare(rec["group"], EpisodeResult.from_dict(rec["episode"]))
                elif op == "commit":
                    # A repeated commit record (rewritten after a failed write) decides nothing new.
                    if self.group_table.state(rec["group"]) is not GroupState.COMMITTED:
                        for ep in self._number_committed(rec["group"], rec["seqs"]):
                            live[ep.seq] = ep
                elif op == "abort":
                    self.group_table.resolve(rec["group"], GroupState.ABORTED)
                elif op == "group":  # a decided group, as a compaction keeps it
                    outcomes = [MemberOutcome(str(i), bool(a), str(r)) for i, a, r in rec["outcomes"]]
                    self.group_table.restore(rec["group"], GroupState(rec["state"]), outcomes)
                elif op == "stepped":
                    pass  # history for the audit: the batch comes back unless a `trained` mark follows
                elif op == "seq":
                    self._next_seq = max(self._next_seq, int(rec["next"]))
                    self.trained_step = max(self.trained_step, int(rec.get("trained_step", 0)))
                    continue  # a header, not an episode record
                else:
                    raise ValueError(f"unknown op {op!r}")
                self._records += 1
            except (ValueError, KeyError, TypeError) as e:
                raise journal.damaged(lineno, e) from e
        for ep in sorted(live.values(), key=lambda e: e.seq):
            self._groups[ep.task_id].append(ep)


def _done() -> Future[None]:
    f: Future[None] = Future()
    f.set_result(None)
    return f


def _log_failure(written: Future[None]) -> None:
    # Discards, trained marks and compactions answer no client: a failed one is logged (a later replay
    # may then bring back episodes that had left, which training tolerates; losing an accepted one it
    # would not, which is why `add`'s failures go back to the caller).
    if written.exception() is not None:
        log.error("pool journal write failed: %s", written.exception())
