"""The sample pool: finished training episodes grouped by task, with an optional durable journal.

The pool is owned by the server's event loop (no locks). With a journal path, every accepted episode is
appended and fsynced *before* the client is told it was accepted, and every batch taken for training is
logged as consumed once its step is checkpointed, so a crashed server can rebuild exactly the episodes
that were accepted but not yet trained on.

Journal records, one JSON object per line: `add` (an accepted episode), `trained` and `discard` (seqs
that left for good), and `seq` (the next sequence number, written first by a compaction). Only
newline-terminated lines were ever acknowledged, so an unterminated last line (a crash mid-append) is
cut off at replay; any other damaged line is an error, not a silent truncation of what follows.

Compaction: records of episodes that left the pool are dead weight, and a long run would grow the journal
without bound. Once `compact_after` of them accumulate, the journal is rewritten (to a temporary file,
then atomically renamed) with one `add` per episode that may still be replayed: pooled ones, and ones
taken for training whose step is not checkpointed yet. This does not depend on checkpoints happening.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from engine.errors import JournalCorrupt
from engine.pool.policies import Selection, select_batch
from engine.types import EpisodeResult

# Dead journal records that trigger a compaction: rare enough that rewriting the live episodes costs
# little per append, small enough that the file stays within a few thousand lines.
COMPACT_AFTER_RECORDS = 2048


class SamplePool:
    """Finished training episodes by task, in arrival order, optionally journaled (module docstring)."""

    def __init__(self, journal: Path | None = None, compact_after: int = COMPACT_AFTER_RECORDS) -> None:
        self._groups: dict[str, list[EpisodeResult]] = defaultdict(list)
        # Taken for training but not yet marked trained: the journal must keep replaying them.
        self._taken: dict[int, EpisodeResult] = {}
        self._next_seq = 1
        self._journal = journal
        self._compact_after = compact_after
        self._records = 0  # episode records in the journal file (all lines but the `seq` header)
        self.discarded = 0
        if journal is not None and journal.exists():
            self._replay(journal)
            self._maybe_compact()

    # -- contents -------------------------------------------------------------------------------
    def add(self, episode: EpisodeResult) -> None:
        """Accept a finished episode (durably first, when journaled)."""
        episode.seq = self._next_seq
        self._next_seq += 1
        if self._journal is not None:
            self._append({"op": "add", "episode": episode.to_dict()})
        self._groups[episode.task_id].append(episode)
        self._maybe_compact()

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

    def mark_trained(self, batch: list[EpisodeResult]) -> None:
        """Record durably that a batch's step is checkpointed; those episodes will not be replayed."""
        for e in batch:
            self._taken.pop(e.seq, None)
        if self._journal is not None:
            self._append({"op": "trained", "seqs": [e.seq for e in batch]})
            self._maybe_compact()

    def restore(self, batch: list[EpisodeResult]) -> None:
        """Put a batch back (its training step failed), keeping arrival order."""
        for e in batch:
            self._taken.pop(e.seq, None)
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
            self._maybe_compact()

    def _append(self, record: dict) -> None:
        assert self._journal is not None
        self._journal.parent.mkdir(parents=True, exist_ok=True)
        with open(self._journal, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._records += 1

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
        tmp = self._journal.with_name(self._journal.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._journal)
        _fsync_dir(self._journal.parent)  # the rename itself must survive a crash
        self._records = len(episodes)

    def _replay(self, journal: Path) -> None:
        live: dict[int, EpisodeResult] = {}
        with open(journal, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        if lines[-1]:
            # An unterminated last line is a crash mid-append: that episode was never acknowledged. Cut it
            # off, or the next append would be glued to it and the journal corrupted from there on.
            with open(journal, "r+b") as f:
                f.truncate(len(data) - len(lines[-1]))
                os.fsync(f.fileno())
        lines = lines[:-1]
        for lineno, line in enumerate(lines, 1):
            try:
                rec = json.loads(line)
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
                raise JournalCorrupt(
                    f"pool journal {journal} line {lineno} is damaged ({type(e).__name__}: {e}); only a torn "
                    "last line can come from a crash. Move the file away to start with an empty pool."
                ) from e
        for ep in sorted(live.values(), key=lambda e: e.seq):
            self._groups[ep.task_id].append(ep)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
