"""The server's lifecycle as an explicit state machine; every transition not in the table is rejected."""

from __future__ import annotations

import time
from enum import Enum

from engine.errors import IllegalTransition


class ServerState(str, Enum):
    OFFLINE = "OFFLINE"  # no model loaded; configure allowed
    BOOTING = "BOOTING"  # loading the model
    ROLLING = "ROLLING"  # serving episodes, pool filling
    ROLLING_POST = "ROLLING_POST"  # pool triggered: no new train episodes, in-flight ones may finish
    WEIGHT_SYNCING = "WEIGHT_SYNCING"  # optimizer steps; inference held until new weights are live


TRANSITIONS: dict[ServerState, frozenset[ServerState]] = {
    ServerState.OFFLINE: frozenset({ServerState.BOOTING}),
    ServerState.BOOTING: frozenset({ServerState.ROLLING, ServerState.OFFLINE}),
    ServerState.ROLLING: frozenset({ServerState.ROLLING_POST, ServerState.OFFLINE}),
    ServerState.ROLLING_POST: frozenset({ServerState.WEIGHT_SYNCING, ServerState.OFFLINE}),
    ServerState.WEIGHT_SYNCING: frozenset({ServerState.ROLLING, ServerState.OFFLINE}),
}


class StateMachine:
    """Holds the current state and its history; the only way to change state is `transition`."""

    def __init__(self) -> None:
        self._state = ServerState.OFFLINE
        self.history: list[tuple[float, ServerState]] = [(time.time(), self._state)]

    @property
    def state(self) -> ServerState:
        return self._state

    def can(self, target: ServerState) -> bool:
        return target in TRANSITIONS[self._state]

    def transition(self, target: ServerState) -> None:
        if not self.can(target):
            allowed = ", ".join(sorted(s.value for s in TRANSITIONS[self._state])) or "none"
            raise IllegalTransition(f"cannot go from {self._state.value} to {target.value} (allowed: {allowed})")
        self._state = target
        self.history.append((time.time(), target))
