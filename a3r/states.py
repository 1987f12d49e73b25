"""Closed vocabularies of the execution plane and the run/attempt state machines.

A *run* is one (blueprint, seed) pair; an *attempt* is one execution of a run on one slot. A retry never
overwrites: it is a new attempt linked to the previous one, and the run goes back to `pending`.

Run transitions (anything else raises `IllegalTransition`):

    pending    -> dispatched | cancelled
    dispatched -> running | pending (retry) | failed | stale | cancelled
    running    -> succeeded | failed | timed_out | stale | pending (retry) | cancelled
    failed | timed_out | stale -> pending   (explicit retry by the caller, e.g. after a code fix)
    succeeded, cancelled       -> (final)

Automatic retries go straight from dispatched/running to pending inside the transaction that settles the
attempt, so a run is never seen `failed` while the scheduler is about to retry it: `RUN_TERMINAL` states
are stable unless the caller asks for a retry.
"""

from __future__ import annotations

from enum import Enum

from a3r.exceptions import IllegalTransition

__all__ = [
    "ACTIVE_ATTEMPT",
    "ATTEMPT_TERMINAL",
    "RUN_TERMINAL",
    "AttemptState",
    "FailureKind",
    "RunState",
    "check_attempt_transition",
    "check_run_transition",
]


class RunState(str, Enum):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    STALE = "stale"
    CANCELLED = "cancelled"


class AttemptState(str, Enum):
    DISPATCHED = "dispatched"  # row written, tmux session being started
    RUNNING = "running"  # worker started the job
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the job (or the worker, for infrastructure) reported a failure
    TIMED_OUT = "timed_out"  # wall-time budget exceeded, job killed by the worker
    STALE = "stale"  # lost: dead pane, silent heartbeat or unreachable host (detected by the monitor)
    CANCELLED = "cancelled"


class FailureKind(str, Enum):
    """Why an attempt failed; drives the retry policy (see `a3r.scheduler`)."""

    OOM = "oom"  # out of memory: retried with a rule fix (smaller micro-batch) when one applies
    NAN_DIVERGENCE = "nan_divergence"  # NaN/inf loss: retried with a rule fix (lower lr) when one applies
    TIMEOUT = "timeout"  # wall-time budget exceeded: final, the budget is part of the experiment
    INFRASTRUCTURE = "infrastructure"  # lost worker/host/pane, signals: retried from checkpoint with backoff
    CODE_ERROR = "code_error"  # anything else: final, handed to the caller with the log tail


RUN_TERMINAL = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.TIMED_OUT, RunState.STALE, RunState.CANCELLED}
)
ATTEMPT_TERMINAL = frozenset(
    {
        AttemptState.SUCCEEDED,
        AttemptState.FAILED,
        AttemptState.TIMED_OUT,
        AttemptState.STALE,
        AttemptState.CANCELLED,
    }
)
ACTIVE_ATTEMPT = frozenset({AttemptState.DISPATCHED, AttemptState.RUNNING})

_R = RunState
RUN_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    _R.PENDING: frozenset({_R.DISPATCHED, _R.CANCELLED}),
    _R.DISPATCHED: frozenset({_R.RUNNING, _R.PENDING, _R.FAILED, _R.STALE, _R.CANCELLED}),
    _R.RUNNING: frozenset({_R.SUCCEEDED, _R.FAILED, _R.TIMED_OUT, _R.STALE, _R.PENDING, _R.CANCELLED}),
    _R.FAILED: frozenset({_R.PENDING}),
    _R.TIMED_OUT: frozenset({_R.PENDING}),
    _R.STALE: frozenset({_R.PENDING}),
    _R.SUCCEEDED: frozenset(),
    _R.CANCELLED: frozenset(),
}

_A = AttemptState
ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    _A.DISPATCHED: frozenset({_A.RUNNING, _A.FAILED, _A.STALE, _A.CANCELLED}),
    _A.RUNNING: frozenset({_A.SUCCEEDED, _A.FAILED, _A.TIMED_OUT, _A.STALE, _A.CANCELLED}),
    **{s: frozenset() for s in ATTEMPT_TERMINAL},
}


def check_run_transition(old: RunState | str, new: RunState | str) -> None:
    """Raise `IllegalTransition` unless a run may move from `old` to `new`."""
    old, new = RunState(old), RunState(new)
    if new not in RUN_TRANSITIONS[old]:
        allowed = ", ".join(sorted(s.value for s in RUN_TRANSITIONS[old])) or "nothing (final state)"
        raise IllegalTransition(
            f"run cannot go {old.value} -> {new.value}; from {old.value} it may go to {allowed}"
        )


def check_attempt_transition(old: AttemptState | str, new: AttemptState | str) -> None:
    """Raise `IllegalTransition` unless an attempt may move from `old` to `new`."""
    old, new = AttemptState(old), AttemptState(new)
    if new not in ATTEMPT_TRANSITIONS[old]:
        allowed = ", ".join(sorted(s.value for s in ATTEMPT_TRANSITIONS[old])) or "nothing (final state)"
        raise IllegalTransition(
            f"attempt cannot go {old.value} -> {new.value}; from {old.value} it may go to {allowed}"
        )
