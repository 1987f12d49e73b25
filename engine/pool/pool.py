"""The sample pool: finished training episodes grouped by task, with an optional durable journal.

The pool is owned by the server's event loop (no locks). With a journal path, every accepted episode is
appended and fsynced *before* the client is told it was accepted, and every batch taken for training is
logged as consumed once its step is checkpointed, so a crashed server can rebuild exactly the episodes
that were accepted but not yet trained on.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from engine.pool.policies import Selection, select_batch
from engine.types import EpisodeResult


class SamplePool:
    def __init__(self, journal: Path | None = None) -> None:
        self._groups: dict[str, list[EpisodeResult]] = defaultdict(list)
        self._next_seq = 1
        self._journal = journal
        self.discarded = 0
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
                if rec["op"] == "add":
                    ep = EpisodeResult.from_dict(rec["episode"])
                    live[ep.seq] = ep
                    self._next_seq = max(self._next_seq, ep.seq + 1)
                else:
                    for s in rec["seqs"]:
                        live.pop(s, None)
        for ep in sorted(live.values(), key=lambda e: e.seq):
            self._groups[ep.task_id].append(ep)
