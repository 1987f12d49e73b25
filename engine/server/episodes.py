"""Live episodes: unguessable scoped keys, per-episode context trackers, deadlines.

An episode's api_key is 256 random bits; the key alone selects the episode, so one episode's key can
never read, extend or end another. Episode ids are public labels and authorise nothing.

A key that was never issued is an authentication failure (401, what OpenAI clients, gateways and retry
policies expect of a bad key); a key of an episode that has finished is "not found" (404), so a client
can tell a typo from an episode that ended, was aborted or expired.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine.errors import AuthenticationFailed, EpisodeNotFound
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
    index: int | None = None  # the client's number for it among its episodes of this task (seeds its calls)
    calls_started: int = 0  # calls begun so far: the next call's index in its sampling stream


@dataclass(frozen=True)
class EndOutcome:
    """What an episode's end was answered: kept so a retried end gets the same answer."""

    episode_id: str
    accepted: bool
    reason: str
    group_id: str | None = None  # set when the episode was prepared for a group (two-phase commit)


@dataclass
class FinishedEpisode:
    """What the registry remembers of an episode after it left: how it ended and, if ended, its answer."""

    episode_id: str
    how: EpisodeEnd
    outcome: EndOutcome | None = None


class EpisodeRegistry:
    """Owns every live episode. Used only from the server's event loop, so it needs no locks.

    It also remembers the last `remember_finished` finished episodes: how each ended, so their keys
    answer 404 rather than 401, and the outcome of an ended one. A client whose end request's response
    was lost (a dropped connection) cannot tell whether the episode entered the pool; retrying the end
    with the same key must neither add it twice nor fail, so it gets the first answer. A key finished
    longer ago than that window reads as never issued (401).
    """

    def __init__(self, idle_timeout_s: float, total_timeout_s: float, remember_finished: int = 4096) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.total_timeout_s = total_timeout_s
        self._by_key: dict[str, LiveEpisode] = {}
        self._finished: OrderedDict[str, FinishedEpisode] = OrderedDict()
        self._remember = remember_finished
        self.counts: dict[str, int] = {e.value: 0 for e in EpisodeEnd}

    def begin(
        self, task_id: str, client_id: str, is_eval: bool, metadata: dict[str, Any], index: int | None = None
    ) -> LiveEpisode:
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
            index=index,
        )
        self._by_key[ep.api_key] = ep
        return ep

    def get(self, api_key: str) -> LiveEpisode:
        """The live episode of `api_key`; raises AuthenticationFailed (unknown) or EpisodeNotFound (finished)."""
        # compare_digest over candidates would be O(n); dict lookup on a 256-bit key leaks nothing useful.
        ep = self._by_key.get(api_key)
        if ep is not None:
            return ep
        done = self._finished.get(api_key)
        if done is None:
            raise AuthenticationFailed("invalid API key: no episode was issued with this key")
        raise EpisodeNotFound(f"episode {done.episode_id} has {done.how.value}; it takes no more requests")

    def record_outcome(
        self, ep: LiveEpisode, accepted: bool, reason: str, group_id: str | None = None
    ) -> EndOutcome:
        """Remember the answer to a finished episode's end or prepare, for a retry (see the class docstring)."""
        out = EndOutcome(ep.episode_id, accepted, reason, group_id)
        self._remember_finished(ep, EpisodeEnd.ENDED).outcome = out
        return out

    def outcome(self, api_key: str) -> EndOutcome | None:
        """The answer an already-ended episode's end got, if it is still remembered."""
        done = self._finished.get(api_key)
        return done.outcome if done is not None else None

    def touch(self, ep: LiveEpisode) -> None:
        ep.last_active = time.monotonic()

    def finish(self, ep: LiveEpisode, how: EpisodeEnd) -> None:
        """Take a live episode out of service; its key answers 404 from now on."""
        if self._by_key.pop(ep.api_key, None) is not None:
            self.counts[how.value] += 1
            self._remember_finished(ep, how)

    def _remember_finished(self, ep: LiveEpisode, how: EpisodeEnd) -> FinishedEpisode:
        done = self._finished.get(ep.api_key)
        if done is None:
            done = self._finished[ep.api_key] = FinishedEpisode(ep.episode_id, how)
            while len(self._finished) > self._remember:
                self._finished.popitem(last=False)
        return done

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
