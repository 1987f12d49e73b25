"""What a policy sees of a run the scheduler gave up on (`a3r.leader.recovery` builds it, policies read it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a3r.states import FailureKind

__all__ = ["FailedRun"]


@dataclass(frozen=True)
class FailedRun:
    """What a policy sees of a run the scheduler gave up on."""

    run_id: int
    name: str  # "<arm label>-s<seed>"
    arm: str  # the blueprint's label
    seed: int
    attempt: int  # number of the failed attempt
    failure_kind: FailureKind
    reason: str  # the classifier's one-line cause
    log_tail: str
    suggested_fix: str | None  # what the scheduler's rule fix for this kind would change now, if one applies
    scheduler_note: str  # the scheduler's last decision on the run
    fixes_tried: tuple[str, ...]  # what changed before each earlier retry
    config: dict[str, Any]  # the failed attempt's effective engine config
