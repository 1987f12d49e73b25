"""The run/attempt state machines: every listed transition is allowed, every other one raises."""

import itertools

import pytest

from a3r.exceptions import IllegalTransition
from a3r.states import (
    ATTEMPT_TERMINAL,
    ATTEMPT_TRANSITIONS,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    AttemptState,
    RunState,
    check_attempt_transition,
    check_run_transition,
)


def test_every_state_has_a_row():
    assert set(RUN_TRANSITIONS) == set(RunState)
    assert set(ATTEMPT_TRANSITIONS) == set(AttemptState)


@pytest.mark.parametrize("old,new", list(itertools.product(RunState, RunState)))
def test_run_transitions_exhaustive(old, new):
    if new in RUN_TRANSITIONS[old]:
        check_run_transition(old, new)
    else:
        with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}"):
            check_run_transition(old, new)


@pytest.mark.parametrize("old,new", list(itertools.product(AttemptState, AttemptState)))
def test_attempt_transitions_exhaustive(old, new):
    if new in ATTEMPT_TRANSITIONS[old]:
        check_attempt_transition(old, new)
    else:
        with pytest.raises(IllegalTransition):
            check_attempt_transition(old, new)


def test_final_states_and_retry_paths():
    assert not RUN_TRANSITIONS[RunState.SUCCEEDED] and not RUN_TRANSITIONS[RunState.CANCELLED]
    for s in (RunState.FAILED, RunState.TIMED_OUT, RunState.STALE):
        assert RUN_TRANSITIONS[s] == {RunState.PENDING}, "terminal failures leave only by an explicit retry"
    assert RunState.PENDING in RUN_TRANSITIONS[RunState.RUNNING], "automatic retries skip the failed state"
    assert all(not ATTEMPT_TRANSITIONS[s] for s in ATTEMPT_TERMINAL), "attempts never come back"
    assert RunState.PENDING not in RUN_TERMINAL


def test_error_message_lists_allowed_targets():
    with pytest.raises(IllegalTransition, match="may go to cancelled, dispatched"):
        check_run_transition("pending", "succeeded")
    with pytest.raises(IllegalTransition, match="final state"):
        check_run_transition("succeeded", "pending")
