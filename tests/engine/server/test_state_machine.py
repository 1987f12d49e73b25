"""Every legal transition is allowed and every other pair is rejected with the allowed list named."""

import itertools

import pytest

from engine.errors import IllegalTransition
from engine.server.state import TRANSITIONS, ServerState, StateMachine

LEGAL = {
    (ServerState.OFFLINE, ServerState.BOOTING),
    (ServerState.BOOTING, ServerState.ROLLING),
    (ServerState.BOOTING, ServerState.OFFLINE),
    (ServerState.ROLLING, ServerState.ROLLING_POST),
    (ServerState.ROLLING, ServerState.OFFLINE),
    (ServerState.ROLLING_POST, ServerState.WEIGHT_SYNCING),
    (ServerState.ROLLING_POST, ServerState.OFFLINE),
    (ServerState.WEIGHT_SYNCING, ServerState.ROLLING),
    (ServerState.WEIGHT_SYNCING, ServerState.OFFLINE),
}


def _machine_at(state: ServerState) -> StateMachine:
    path = {
        ServerState.OFFLINE: [],
        ServerState.BOOTING: [ServerState.BOOTING],
        ServerState.ROLLING: [ServerState.BOOTING, ServerState.ROLLING],
        ServerState.ROLLING_POST: [ServerState.BOOTING, ServerState.ROLLING, ServerState.ROLLING_POST],
        ServerState.WEIGHT_SYNCING: [
            ServerState.BOOTING, ServerState.ROLLING, ServerState.ROLLING_POST, ServerState.WEIGHT_SYNCING,
        ],
    }[state]
    sm = StateMachine()
    for s in path:
        sm.transition(s)
    assert sm.state is state
    return sm


def test_table_is_exactly_the_documented_lifecycle():
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == LEGAL


@pytest.mark.parametrize("src,dst", sorted(itertools.product(ServerState, ServerState)))
def test_every_pair(src, dst):
    sm = _machine_at(src)
    if (src, dst) in LEGAL:
        sm.transition(dst)
        assert sm.state is dst
        assert sm.history[-1][1] is dst
    else:
        with pytest.raises(IllegalTransition, match=f"cannot go from {src.value} to {dst.value}"):
            sm.transition(dst)
        assert sm.state is src


def test_full_cycle_returns_to_rolling():
    sm = _machine_at(ServerState.WEIGHT_SYNCING)
    sm.transition(ServerState.ROLLING)
    sm.transition(ServerState.ROLLING_POST)
    assert [s for _, s in sm.history][-2:] == [ServerState.ROLLING, ServerState.ROLLING_POST]
