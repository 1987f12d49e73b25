"""The sample pool: finished training episodes grouped by task, with an optional durable journal.

The pool is owned by the server's event loop (no locks). With a journal path, every accepted episode is
appended and fsynced *before* the client is told it was accepted, and every batch taken for training is
logged as consumed once its step is checkpointed, so a crashed server can rebuild exactly the episodes
that were accepted but not yet trained on.

Episode groups (two-phase commit, see engine.pool.groups) journal `prepare` (the finished episode, outside
the pool), then `commit` (the seqs it takes in the pool) or `abort`; a replay restores prepared groups as
still in doubt, committed ones into the pool and aborted ones nowhere.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from engine.pool.groups import GroupState, GroupTable, MemberOutcome
from engine.pool.policies import Selection, select_batch
from engine.types import EpisodeResult


class SamplePool:
    def __init__(self, journal: Path | None = None) -> None:
        self._groups: dict[str, list[EpisodeResult]] = defaultdict(list)
        self._next_seq = 1
        self._journal = journal
        self.discarded = 0
        self.group_table = GroupTable()
        if journal is not None and journal.exists():
            self._replay(journal)

    # -- contents -------------------------------------------------------------------------------
    def add(self, episode: EpisodeResult) -> None:
        """Accept a finished episode (durably first, when journaled)."""
        episode.seq = self._next_seq
        self._next_seq += 1
        if self._journal is not None:
            self._append({"op": "add", "episode": episode.to_dict()})
        self._groups[episode.task_id].append(episode)

    # -- episode groups (two-phase commit) -----------------------------------------------------
    def prepare(self, group_id: str, episode: EpisodeResult) -> None:
        """Hold a finished episode for `group_id` (durably first, when journaled); not in the pool yet."""
        self.group_table.check_prepare(group_id)
        if self._journal is not None:
            self._append({"op": "prepare", "group": group_id, "episode": episode.to_dict()})
        self.group_table.prepare(group_id, episode)

    def commit_group(self, group_id: str) -> list[MemberOutcome]:
        """Move a prepared group's episodes into the pool (idempotent); returns what each member became.

        Episodes without any LLM call are not pooled (nothing to train on); their ids are still answered.
        """
        if self.group_table.check_commit(group_id):
            episodes = self.group_table.episodes(group_id)
            trainable = [e for e in episodes if e.timelines]
            seqs = list(range(self._next_seq, self._next_seq + len(trainable)))
            if self._journal is not None:  # one record decides the whole group on this server
                self._append({"op": "commit", "group": group_id, "seqs": seqs})
            for ep in self._number_committed(group_id, seqs):
                self._groups[ep.task_id].append(ep)
        return self.group_table.outcomes(group_id)

    def abort_group(self, group_id: str) -> bool:
        """Drop a group's prepared episodes (idempotent; an unknown group is recorded as aborted, so a
        late prepare of it is refused). True when this call aborted it."""
        if not self.group_table.check_abort(group_id):
            return False
        if self._journal is not None:
            self._append({"op": "abort", "group": group_id})
        self.group_table.resolve(group_id, GroupState.ABORTED)
        return True

    def _number_committed(self, group_id: str, seqs: list[int]) -> list[EpisodeResult]:
        """Mark a group committed and give its trainable episodes their pool seqs; returns them."""
        trainable = [e for e in self.group_table.episodes(group_id) if e.timelines]
        for ep, seq in zip(trainable, seqs, strict=True):
            ep.seq = seq
        self._next_seq = max([self._next_seq, *(s + 1 for s in seqs)])
        self.group_table.resolve(group_id, GroupState.COMMITTED)
        return trainable

    def __len__(self) -> int:
        return sum(len(g) for g in self._groups.values())

    @property
    def groups(self) -> dict[str, list[EpisodeResult]]:
        return self._groups

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

    def mark_trained(self, batch: list[EpisodeResult]) -> None:
        """Record durably that a batch's step is checkpointed; those episodes will not be replayed."""
        if self._journal is not None:
            self._append({"op": "trained", "seqs": [e.seq for e in batch]})

    def restore(self, batch: list[EpisodeResult]) -> None:
        """Put a batch back (its training step failed), keeping arrival order."""
        for e in batch:
            self._groups[e.task_id].append(e)
            self._groups[e.task_id].sort(key=lambda x: x.seq)

    # -- journal --------------------------------------------------------------------------------
    def _remove(self, episodes: list[EpisodeResult], op: str | None) -> None:
        seqs = {e.seq for e in episodes}
        for task in list(self._groups):
            kept = [e for e in self._groups[task] if e.seq not in seqs]
            if kept:
                self._groups[task] = kept
            else:
                del self._groups[task]
        if op is not None and self._journal is not None:
            self._append({"op": op, "seqs": sorted(seqs)})

    def _append(self, record: dict) -> None:
        assert self._journal is not None
        self._journal.parent.mkdir(parents=True, exist_ok=True)
        with open(self._journal, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _replay(self, journal: Path) -> None:
        live: dict[int, EpisodeResult] = {}
        with open(journal, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break  # a torn final line from a crash mid-append: that episode was never acknowledged
                op = rec["op"]
                if op == "add":
                    ep = EpisodeResult.from_dict(rec["episode"])
                    live[ep.seq] = ep
                    self._next_seq = max(self._next_seq, ep.seq + 1)
                elif op == "prepare":
                    self.group_table.prepare(rec["group"], EpisodeResult.from_dict(rec["episode"]))
                elif op == "commit":
                    for ep in self._number_committed(rec["group"], rec["seqs"]):
                        live[ep.seq] = ep
                elif op == "abort":
                    self.group_table.resolve(rec["group"], GroupState.ABORTED)
                else:
                    for s in rec["seqs"]:
                        live.pop(s, None)
        for ep in sorted(live.values(), key=lambda e: e.seq):
            self._groups[ep.task_id].append(ep)
