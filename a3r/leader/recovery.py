"""Failed runs the policy may repair before the stage is analysed.

The scheduler settles every attempt first: infrastructure failures are retried from the checkpoint, OOM
and NaN get rule fixes (`a3r.fixes`), and only a run it gives up on ends `failed`. The leader's wait node
then calls `revise_failed_runs` each time it wakes. For each failed run of the stage without a revision
record, the policy sees the classified failure (`FailedRun`: kind, reason, the rule fix the scheduler
would suggest, the fixes already tried, the log tail, the failed attempt's config) and may answer with new
values for some knobs. The run is re-queued in place (`Workspace.retry`: same run id, seed and arm, the
changes merged into its engine config), so the stage's run list and the analysis stay as they are.

Each decision is recorded once, before the run is re-queued, in `runs/<run id>/revision.json` under the
workspace root (`revisions()` reads them back for the report): at most one revision per run, and a wait
node that re-runs after a crash finishes a re-queue it had recorded instead of asking again. The store
keeps the change as well: the retry event, and `Attempt.fix` of the next attempt.

Changes are checked here whatever the policy (`check_changes`): knob keys only (an alias becomes its key),
values valid for the knob, never a studied variable (it defines the arm), different from the values that
failed, and the revised config must still be a valid engine job.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from a3r.api import Workspace
from a3r.blueprints import deep_merge
from a3r.fixes import propose_fix
from a3r.leader.failed_run import FailedRun
from a3r.leader.goals import Goal
from a3r.leader.knobs import get_knob, knob_value, set_dotted, set_knob_value
from a3r.states import FailureKind, RunState
from a3r.store import Run

if TYPE_CHECKING:
    from a3r.leader.policy import Policy

__all__ = [
    "REVISABLE",
    "FailedRun",
    "Revision",
    "check_changes",
    "failed_run",
    "revise_failed_runs",
    "revisions",
]

# A timeout is the experiment's budget and an infrastructure failure is not the config's fault (the
# scheduler has already retried it), so only these reach the policy.
REVISABLE = frozenset({FailureKind.CODE_ERROR, FailureKind.OOM, FailureKind.NAN_DIVERGENCE})
RECORD_FILE = "revision.json"


class Revision(BaseModel):
    """One policy decision on a failed run, as recorded in `runs/<run id>/revision.json`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: int
    arm: str
    seed: int
    failed_attempt: int
    failure_kind: FailureKind
    reason: str
    policy: str
    before: dict[str, Any]  # knob key -> value the run failed with
    after: dict[str, Any]  # knob key -> value of the retry; empty: the policy left the run as it failed

    def change(self) -> str:
        """The change in words, e.g. "max_tokens 4 -> 16"."""
        return ", ".join(f"{k} {self.before.get(k)!r} -> {v!r}" for k, v in self.after.items())

    def describe(self) -> str:
        """One line for the report."""
        failure = f"run {self.run_id} ({self.arm}, seed {self.seed}) failed with {self.failure_kind.value}"
        if not self.after:
            return f"{failure} ({self.reason}); {self.policy} proposed no change"
        return f"{failure} ({self.reason}); {self.policy} set {self.change()} and re-queued it"


def check_changes(goal: Goal, run: FailedRun, changes: dict[str, Any]) -> dict[str, Any]:
    """`changes` as {knob key: value of the knob's type}; raises ValueError saying what is not allowed."""
    studied = {goal.factor.key} | ({goal.secondary.key} if goal.secondary is not None else set())
    studied_fields = {f for key in studied for f in get_knob(key).fields}  # a clip ratio is both clip ends
    out: dict[str, Any] = {}
    for name, value in changes.items():
        try:
            knob = get_knob(name)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        if knob.key in studied or studied_fields & set(knob.fields):
            raise ValueError(
                f"{knob.key} is a studied variable: changing it would make {run.name} another arm"
            )
        new = knob.coerce(value)
        if new == knob_value(run.config, knob.key):
            raise ValueError(
                f"{knob.key} is already {new!r} in the failed run; a retry needs a different value"
            )
        out[knob.key] = new
    if out:
        _check_job(deep_merge(run.config, _overrides(out)))
    return out


def _check_job(config: dict[str, Any]) -> None:
    from engine.jobs import TrainJob

    try:
        TrainJob.model_validate(config)
    except ValidationError as e:
        why = "; ".join(err["msg"] for err in e.errors())
        raise ValueError(f"the revised settings are not a valid engine job: {why}") from None


def _overrides(changes: dict[str, Any]) -> dict[str, Any]:
    """Nested engine-config overrides for knob changes, with the settings each changed knob needs."""
    out: dict[str, Any] = {}
    for key, value in changes.items():
        for req_key, req_value in get_knob(key).requires.items():
            set_dotted(out, req_key, req_value)
        set_knob_value(out, key, value)
    return out


def failed_run(ws: Workspace, run: Run) -> FailedRun:
    """The policy's view of a failed run, from the store."""
    attempts = ws.attempts(run.id)
    last = attempts[-1]
    kind = _kind(run)
    config = json.loads(last.config_json)
    fix = propose_fix(kind, config)
    return FailedRun(
        run_id=run.id,
        name=run.name,
        arm=ws.store.blueprint_of(run).label,
        seed=run.seed,
        attempt=last.number,
        failure_kind=kind,
        reason=last.reason,
        log_tail=last.log_tail,
        suggested_fix=None if fix is None else f"{fix[0]}: {fix[2]}",
        scheduler_note=run.message,
        fixes_tried=tuple(a.fix for a in attempts if a.fix),
        config=config,
    )


def revise_failed_runs(ws: Workspace, policy: Policy, goal: Goal, run_ids: Iterable[int]) -> list[str]:
    """Ask the policy once about each failed run among `run_ids` and re-queue the runs it revises.

    Returns one line per run re-queued by this call. Safe to call again at any point (after a crash too):
    a recorded decision is never asked again, and a recorded revision is re-queued exactly once.
    """
    lines = []
    for run in ws.runs(ids=list(run_ids), states=[RunState.FAILED]):
        if _kind(run) not in REVISABLE:
            continue
        rev = _read(ws, run.id) or _decide(ws, policy, goal, run)
        # A record for an earlier attempt means the revised retry ran and failed too: at most once per run.
        if rev.after and rev.failed_attempt == ws.attempts(run.id)[-1].number:
            ws.retry(run.id, overrides=_overrides(rev.after), reason=_reason(rev))
            lines.append(rev.describe())
    return lines


def _kind(run: Run) -> FailureKind:
    # The scheduler settles an unclassified failure as a code error; so does this.
    return FailureKind(run.failure_kind or FailureKind.CODE_ERROR)


def _decide(ws: Workspace, policy: Policy, goal: Goal, run: Run) -> Revision:
    failed = failed_run(ws, run)
    changes = check_changes(goal, failed, policy.revise_failed(goal, failed) or {})
    rev = Revision(
        run_id=run.id,
        arm=failed.arm,
        seed=run.seed,
        failed_attempt=failed.attempt,
        failure_kind=failed.failure_kind,
        reason=failed.reason,
        policy=policy.name,
        before={k: knob_value(failed.config, k) for k in changes},
        after=changes,
    )
    _write(ws, rev)
    return rev


def _reason(rev: Revision) -> str:
    """Why the run goes back to the queue; the store copies it into the next attempt's `fix`."""
    return f"revised by {rev.policy} after {rev.failure_kind.value}: {rev.change()}"


def revisions(ws: Workspace, run_ids: Iterable[int]) -> list[Revision]:
    """The recorded policy decisions on failed runs among `run_ids`, by run id."""
    return [rev for rid in sorted(run_ids) if (rev := _read(ws, rid)) is not None]


def _path(ws: Workspace, run_id: int) -> Path:
    return ws.root / "runs" / str(run_id) / RECORD_FILE


def _read(ws: Workspace, run_id: int) -> Revision | None:
    path = _path(ws, run_id)
    return Revision.model_validate_json(path.read_text()) if path.exists() else None


def _write(ws: Workspace, rev: Revision) -> None:
    path = _path(ws, rev.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(rev.model_dump_json(indent=2))
    os.replace(tmp, path)  # a leader killed mid-write leaves no half record
