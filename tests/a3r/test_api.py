"""Pins the public API the leader (and generated code) depends on: names and signatures. A change here
is a breaking change for a3r.leader; update the docs (docs/a3r-execution.md) with it."""

import inspect

from a3r.api import FailureInfo, RunsStatus, Workspace
from a3r.blueprints import Blueprint, Budget
from a3r.states import FailureKind, RunState

EXPECTED = {
    "create": "(root: 'str | Path', config: 'WorkspaceConfig | None' = None, *, db_path: 'str | Path | None' = None) -> 'Workspace'",
    "create_campaign": "(self, name: 'str', goal: 'str' = '') -> 'Campaign'",
    "create_stage": "(self, campaign_id: 'int', name: 'str', purpose: 'str' = '') -> 'Stage'",
    "add_blueprints": "(self, stage_id: 'int', blueprints: 'Sequence[Blueprint]', *, priority: 'int' = 0) -> 'list[Run]'",
    "poll": "(self) -> 'TickReport'",
    "start_monitor": "(self, *, log_file: 'str | Path | None' = None) -> 'int'",
    "stop_monitor": "(self, timeout: 'float' = 10.0) -> 'bool'",
    "poll_runs": "(self, run_ids: 'Iterable[int]') -> 'RunsStatus'",
    "wait": "(self, run_ids: 'Iterable[int]', *, timeout: 'float | None' = None, poll_s: 'float | None' = None, drive: 'bool' = False) -> 'dict[int, RunState]'",
    "metric_series": "(self, run_id: 'int', name: 'str') -> 'list[tuple[int, float | None]]'",
    "final_metrics": "(self, run_id: 'int') -> 'dict[str, float | None]'",
    "attempts": "(self, run_id: 'int') -> 'list[Attempt]'",
    "failures": "(self, *, campaign_id: 'int | None' = None, stage_id: 'int | None' = None, final_only: 'bool' = False) -> 'list[FailureInfo]'",
    "cancel": "(self, run_ids: 'Sequence[int]', reason: 'str' = 'cancelled by caller') -> 'list[int]'",
    "retry": "(self, run_id: 'int', *, overrides: 'dict[str, Any] | None' = None, reason: 'str' = 'retry requested') -> 'Run'",
    "logs": "(self, run_id: 'int', *, attempt: 'int | None' = None, lines: 'int' = 100) -> 'str'",
}


def test_workspace_signatures():
    for name, sig in EXPECTED.items():
        assert str(inspect.signature(getattr(Workspace, name))) == sig, name


def test_value_types():
    assert [f for f in FailureInfo.__dataclass_fields__] == [
        "run_id",
        "run_name",
        "run_state",
        "attempt",
        "attempt_state",
        "failure_kind",
        "exit_code",
        "reason",
        "log_tail",
        "config",
    ]
    assert RunsStatus({1: RunState.PENDING}, done=False).unfinished == [1]
    assert {k.value for k in FailureKind} == {
        "oom",
        "nan_divergence",
        "timeout",
        "infrastructure",
        "code_error",
    }
    assert {s.value for s in RunState} == {
        "pending",
        "dispatched",
        "running",
        "succeeded",
        "failed",
        "timed_out",
        "stale",
        "cancelled",
    }
    assert list(Blueprint.model_fields)[:9] == [
        "purpose",
        "hypothesis",
        "engine_config",
        "task",
        "seeds",
        "budget",
        "metrics",
        "success_criteria",
        "launch_command",
    ]
    assert list(Budget.model_fields) == ["steps", "wall_time_s"]
