"""Live episodes: unguessable scoped keys, per-episode context trackers, deadlines.

An episode's api_key is 256 random bits; the key alone selects the episode, so one episode's key can
never read, extend or end another. Episode ids are public labels and authorise nothing.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine.errors import EpisodeNotFound
from engine.tracking.tracker import ContextTracker


class EpisodeEnd(str, Enum):
    ENDED = "ended"
    ABORTED = "aborted"
    EXPIRED = "expired"


@dataclass
class LiveEpisode:
    episode_id: str
    api_key: str
    task_id: str
    client_id: str
    is_eval: bool
    started_at: float
    last_active: float
    metadata: dict[str, Any] = field(default_factory=dict)
    tracker: ContextTracker = field(default_factory=ContextTracker)
    calls_in_flight: int = 0
    prompt_messages: list[dict[str, Any]] | None = None  # last call's request, kept for collaboration groups


@dataclass(frozen=True)
class EndOutcome:
    """What an episode's end was answered: kept so a retried end gets the same answer."""

    episode_id: str
    accepted: bool
    reason: str
    group_id: str | None = None  # set when the episode was prepared for a group (two-phase commit)


class EpisodeRegistry:
    """Owns every live episode. Used only from the server's event loop, so it needs no locks.

    It also remembers the outcome of the last `remember_outcomes` ended episodes. A client whose end
    request's response was lost (a dropped connection) cannot tell whether the episode entered the pool;
    retrying the end with the same key must neither add it twice nor fail, so it gets the first answer.
    """

    def __init__(self, idle_timeout_s: float, total_timeout_s: float, remember_outcomes: int = 4096) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.total_timeout_s = total_timeout_s
        self._by_key: dict[str, LiveEpisode] = {}
        self._outcomes: OrderedDict[str, EndOutcome] = OrderedDict()
        self._remember = remember_outcomes
        self.counts: dict[str, int] = {e.value: 0 for e in EpisodeEnd}

    def begin(self, task_id: str, client_id: str, is_eval: bool, metadata: dict[str, Any]) -> LiveEpisode:
        now = time.monotonic()
        ep = LiveEpisode(
            episode_id="ep-" + secrets.token_hex(8),
            api_key="sk-ep-" + secrets.token_urlsafe(32),
            task_id=task_id,
            client_id=client_id,
            is_eval=is_eval,
            started_at=now,
            last_active=now,
            metadata=metadata,
        )
        self._by_key[ep.api_key] = ep
        return ep

    def get(self, api_key: str) -> LiveEpisode:
        # compare_digest over candidates would be O(n); dict lookup on a 256-bit key leaks nothing useful.
        ep = self._by_key.get(api_key)
        if ep is None:
            raise EpisodeNotFound("unknown or finished episode key")
        return ep

    def record_outcome(
        self, ep: LiveEpisode, accepted: bool, reason: str, group_id: str | None = None
    ) -> EndOutcome:
        out = EndOutcome(ep.episode_id, accepted, reason, group_id)
        self._outcomes[ep.api_key] = out
        while len(self._outcomes) > self._remember:
            self._outcomes.popitem(last=False)
        return out

    def outcome(self, api_key: str) -> EndOutcome | None:
        """The answer an already-ended episode's end got, if it is still remembered."""
        return self._outcomes.get(api_key)

    def touch(self, ep: LiveEpisode) -> None:
        ep.last_active = time.monotonic()

    def finish(self, ep: LiveEpisode, how: EpisodeEnd) -> None:
        if self._by_key.pop(ep.api_key, None) is not None:
            self.counts[how.value] += 1

    def expired(self, now: float | None = None) -> list[LiveEpisode]:
        """Episodes past their idle or total deadline. A call in flight keeps an episode from idling out."""
        now = time.monotonic() if now is None else now
        out = []
        for ep in self._by_key.values():
            idle = ep.calls_in_flight == 0 and now - ep.last_active > self.idle_timeout_s
            if idle or now - ep.started_at > self.total_timeout_s:
                out.append(ep)
        return out

    def live(self) -> list[LiveEpisode]:
        return list(self._by_key.values())

    def in_flight(self, is_eval: bool | None = None) -> int:
        return sum(1 for e in self._by_key.values() if is_eval is None or e.is_eval == is_eval)
