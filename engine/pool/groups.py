"""Two-phase commit of episode groups on one server: the participant's side.

A client that runs one workflow on several servers (one per trainable model) must get its episodes into
every pool or into none. It first *prepares* each episode (the server closes it and stores the finished
episode durably, outside the pool), then, once every server has prepared, *commits* the group on each
server (the prepared episodes enter the pool); if any prepare fails it *aborts* the group everywhere.

Participant state of one group on one server:

    (unknown) --prepare--> PREPARED --commit--> COMMITTED
        |                     |
        +------abort----------+--abort--> ABORTED

Commit and abort are idempotent (a repeat gets the same answer); committing an aborted group or aborting
a committed one is a conflict. A server that restarts between prepare and commit replays its journal and
holds the group PREPARED again ("in doubt") until the client's commit or abort arrives: the decision is
the client's, and a prepared group never resolves itself (that could split the group across servers).

Pure bookkeeping: the pool (engine.pool.pool) owns the journal and calls these methods from the
server's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from engine.errors import GroupConflict, GroupNotFound
from engine.types import EpisodeResult


class GroupState(str, Enum):
    UNKNOWN = "unknown"  # never prepared here (or forgotten)
    PREPARED = "prepared"  # episodes stored durably, not in the pool yet: in doubt
    COMMITTED = "committed"  # episodes entered the pool
    ABORTED = "aborted"  # episodes dropped


@dataclass(frozen=True)
class MemberOutcome:
    """What a committed group's member became: `accepted` when it entered the pool."""

    episode_id: str
    accepted: bool
    reason: str = ""


@dataclass
class GroupRecord:
    state: GroupState
    episodes: list[EpisodeResult] = field(default_factory=list)  # while PREPARED
    outcomes: list[MemberOutcome] = field(default_factory=list)  # once COMMITTED (episodes are dropped)


class GroupTable:
    """Group id -> state and prepared episodes. Resolved groups keep their episodes' ids for answers."""

    def __init__(self) -> None:
        self._groups: dict[str, GroupRecord] = {}

    def state(self, group_id: str) -> GroupState:
        rec = self._groups.get(group_id)
        return GroupState.UNKNOWN if rec is None else rec.state

    def episodes(self, group_id: str) -> list[EpisodeResult]:
        """A prepared group's episodes (empty once resolved)."""
        rec = self._groups.get(group_id)
        return [] if rec is None else list(rec.episodes)

    def outcomes(self, group_id: str) -> list[MemberOutcome]:
        rec = self._groups.get(group_id)
        return [] if rec is None else list(rec.outcomes)

    def in_doubt(self) -> list[str]:
        """Prepared groups waiting for their client's decision."""
        return [g for g, r in self._groups.items() if r.state is GroupState.PREPARED]

    def decided(self) -> list[tuple[str, GroupState, list[MemberOutcome]]]:
        """Committed and aborted groups with their members' outcomes (what a journal compaction keeps)."""
        return [
            (g, r.state, list(r.outcomes))
            for g, r in self._groups.items()
            if r.state is not GroupState.PREPARED
        ]

    def restore(self, group_id: str, state: GroupState, outcomes: list[MemberOutcome]) -> None:
        """A decided group as a compacted journal records it: its state and members' outcomes."""
        self._groups[group_id] = GroupRecord(state, outcomes=list(outcomes))

    def check_prepare(self, group_id: str) -> None:
        state = self.state(group_id)
        if state not in (GroupState.UNKNOWN, GroupState.PREPARED):
            raise GroupConflict(f"group {group_id!r} is already {state.value}; start a new group")

    def prepare(self, group_id: str, episode: EpisodeResult) -> None:
        self.check_prepare(group_id)
        self._groups.setdefault(group_id, GroupRecord(GroupState.PREPARED)).episodes.append(episode)

    def unprepare(self, group_id: str, episode_id: str) -> bool:
        """Take one episode back out of a prepared group (its record never became durable); a group left
        empty is forgotten. False when the group is no longer prepared (decided meanwhile)."""
        rec = self._groups.get(group_id)
        if rec is None or rec.state is not GroupState.PREPARED:
            return False
        rec.episodes = [e for e in rec.episodes if e.episode_id != episode_id]
        if not rec.episodes:
            del self._groups[group_id]
        return True

    def check_commit(self, group_id: str) -> bool:
        """True when the group must be committed now, False when it already is (a repeated commit)."""
        state = self.state(group_id)
        if state is GroupState.ABORTED:
            raise GroupConflict(f"group {group_id!r} was aborted; it cannot be committed")
        if state is GroupState.UNKNOWN:
            raise GroupNotFound(f"group {group_id!r} has no prepared episode on this server")
        return state is GroupState.PREPARED

    def resolve(self, group_id: str, state: GroupState) -> None:
        """COMMITTED or ABORTED; the prepared episodes are released (the pool holds committed ones)."""
        rec = self._groups.setdefault(group_id, GroupRecord(state))
        if state is GroupState.COMMITTED:
            rec.outcomes = [
                MemberOutcome(e.episode_id, True)
                if e.timelines
                else MemberOutcome(e.episode_id, False, "episode made no LLM call: nothing to train on")
                for e in rec.episodes
            ]
        rec.state = state
        rec.episodes = []

    def check_abort(self, group_id: str) -> bool:
        """True when the group must be aborted now, False when it already is."""
        state = self.state(group_id)
        if state is GroupState.COMMITTED:
            raise GroupConflict(f"group {group_id!r} was committed; it cannot be aborted")
        return state is not GroupState.ABORTED
