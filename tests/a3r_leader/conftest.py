"""Fixtures for the leader tests: a real workspace store, and a helper that records runs in it the way a
worker would (dispatch, running, metric points, finish, settle), for synthetic campaigns without tmux."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from a3r.api import Workspace
from a3r.blueprints import canonical_json
from a3r.config import HostSpec, WorkspaceConfig
from a3r.states import FailureKind, RunState


@pytest.fixture
def ws(tmp_path):
    w = Workspace.create(tmp_path / "ws", WorkspaceConfig(hosts=[HostSpec(name="local", slots=1)]))
    yield w
    w.close()


def record_attempt(
    ws: Workspace,
    run_id: int,
    curve: list[tuple[int, float]],
    *,
    outcome: str = "succeeded",
    retry: bool = False,
    metric: str = "eval_accuracy",
) -> None:
    """One attempt of `run_id` on local/0 that logged `curve` (points of `metric`) and ended `outcome`
    (succeeded or failed).

    A failed attempt is settled as a retry (run back to pending) when `retry`, else as a final failure.
    """
    run = ws.store.get_run(run_id)
    cfg = ws.store.blueprint_of(run).effective_config(run.seed)
    att = ws.store.dispatch(
        run_id, host="local", slot="0", run_dir=f"/runs/{run_id}", config_json=canonical_json(cfg)
    )
    assert att is not None, "slot busy or run not pending"
    ws.store.mark_running(att.id)
    ws.store.ingest_metrics(
        att.id, [(s, metric, v) for s, v in curve], expected_offset=0, new_offset=1
    )
    if outcome == "succeeded":
        ws.store.finish_attempt(att.id, "succeeded", exit_code=0)
        ws.store.settle_run(run_id, att.id, RunState.SUCCEEDED)
        return
    kind = FailureKind.INFRASTRUCTURE.value if retry else FailureKind.CODE_ERROR.value
    ws.store.finish_attempt(att.id, "failed", exit_code=1, failure_kind=kind, reason=f"{kind} (synthetic)")
    ws.store.settle_run(
        run_id,
        att.id,
        RunState.PENDING if retry else RunState.FAILED,
        failure_kind=None if retry else kind,
        next_fix="retry after infrastructure failure" if retry else None,
    )


@pytest.fixture
def record() -> Callable[..., None]:
    return record_attempt
