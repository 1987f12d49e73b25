"""The sample pool: finished training episodes grouped by task, with an optional durable journal.

The pool is owned by the server's event loop (no locks): its memory changes synchronously, in the loop,
and the journal's file work (`engine.pool.journal`) runs on a writer thread in the same order. With a
journal path, every accepted episode's `add` record is fsynced *before* the client is told it was
accepted (the server awaits the future `add` returns), and every batch taken for training is logged as
consumed once its step is checkpointed, so a crashed server can rebuild exactly the episodes that were
accepted but not yet trained on.

Journal records, one JSON object per line: `add` (an accepted episode), `trained` and `discard` (seqs
that left for good), and `seq` (the next sequence number, written first by a compaction).

Compaction: records of episodes that left the pool are dead weight, and a long run would grow the journal
without bound. Once `compact_after` of them accumulate, the journal is rewritten (to a temporary file,
then atomically renamed) with one `add` per episode that may still be replayed: pooled ones, and ones
taken for training whose step is not checkpointed yet. This does not depend on checkpoints happening.
Because writes keep their submission order, a compaction snapshot taken in the loop already holds every
episode whose `add` was submitted before it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import Future
from pathlib import Path

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
        self._records = 0  # episode records in the journal file (all lines but the `seq` header)
        self.discarded = 0
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
        self._taken.update((e.seq, e) for e in batch)

    def mark_trained(self, batch: list[EpisodeResult]) -> Future[None]:
        """Record durably that a batch's step is checkpointed; those episodes will not be replayed."""
        for e in batch:
            self._taken.pop(e.seq, None)
        written = self._append({"op": "trained", "seqs": [e.seq for e in batch]})
        written.add_done_callback(_log_failure)
        self._maybe_compact()
        return written

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
        return self._journal.append(record)

    def _maybe_compact(self) -> None:
        """Rewrite the journal once its dead records reach the threshold (each live episode has one add)."""
        if self._journal is None:
            return
        live = len(self) + len(self._taken)
        if self._records - live < self._compact_after:
            return
        pooled = [e for g in self._groups.values() for e in g]
        episodes = sorted([*pooled, *self._taken.values()], key=lambda e: e.seq)
        records = [{"op": "seq", "next": self._next_seq}]
        records += [{"op": "add", "episode": e.to_dict()} for e in episodes]
        self._journal.rewrite(records).add_done_callback(_log_failure)
        self._records = len(episodes)

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
                elif op == "seq":
                    self._next_seq = max(self._next_seq, int(rec["next"]))
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
