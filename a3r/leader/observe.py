"""Read a campaign's runs back from the execution plane as analysis observations plus their provenance.

Everything the analysis and the report know about a run comes through `observe`: the studied values are
read from the stored blueprint's engine config (the truth of what ran, not what the leader meant), the
curve from the store's metric points, the host and effective config from the attempts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from a3r.analysis import RunObs
from a3r.api import Workspace
from a3r.leader.design import arm_label
from a3r.leader.goals import Goal
from a3r.leader.knobs import knob_value

__all__ = ["AttemptRecord", "RunRecord", "observe"]


@dataclass(frozen=True)
class AttemptRecord:
    number: int
    state: str
    host: str
    slot: str
    failure_kind: str | None
    reason: str
    exit_code: int | None
    fix: str | None
    config_hash: str  # sha256[:12] of the effective engine config this attempt ran with
    wall_s: float  # started -> ended (0 when it never started)


@dataclass(frozen=True)
class RunRecord:
    obs: RunObs
    name: str
    stage_name: str
    blueprint_hash: str
    message: str
    attempts: tuple[AttemptRecord, ...] = field(default_factory=tuple)
    budget_steps: int = 0  # the stage's steps per run (the blueprint's budget)
    steps_done: int = 0
    episodes: int = 0  # steps_done x batch size x group size

    @property
    def wall_s(self) -> float:
        return sum(a.wall_s for a in self.attempts)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def observe(
    ws: Workspace, campaign_id: int, goal: Goal, calibration_stages: frozenset[int] = frozenset()
) -> list[RunRecord]:
    """Every run of the campaign, by id, with its curve of `goal.metric` and its attempt history.
    Runs of the stages in `calibration_stages` (1-based indices) are marked as calibration runs."""
    stages = {s.id: s for s in ws.store.stages(campaign_id)}
    out = []
    for run in ws.runs(campaign_id=campaign_id):
        bp = ws.store.blueprint_of(run)
        cfg = bp.engine_config
        x = knob_value(cfg, goal.factor.key)
        level = knob_value(cfg, goal.secondary.key) if goal.secondary is not None else None
        atts = ws.attempts(run.id)
        records = tuple(
            AttemptRecord(
                number=a.number,
                state=a.state,
                host=a.host,
                slot=a.slot,
                failure_kind=a.failure_kind,
                reason=a.reason,
                exit_code=a.exit_code,
                fix=a.fix,
                config_hash=_hash(a.config_json),
                wall_s=max(0.0, (a.ended_at or a.started_at or 0.0) - (a.started_at or a.ended_at or 0.0)),
            )
            for a in atts
        )
        series = tuple(ws.metric_series(run.id, goal.metric))
        steps = max(ws.store.latest_steps([run.id]).get(run.id, 0), max((s for s, _v in series), default=0))
        pool = cfg.get("swarm", {}).get("pool", {})
        last = records[-1] if records else None
        stage_index = stages[run.stage_id].index + 1
        obs = RunObs(
            run_id=run.id,
            stage=stage_index,
            seed=run.seed,
            x=x,
            level=level,
            label=arm_label(goal, x, level),
            state=run.state,
            series=series,
            host=last.host if last else None,
            config_hash=last.config_hash if last else None,
            attempts=len(records),
            calibration=stage_index in calibration_stages,
        )
        out.append(
            RunRecord(
                obs=obs,
                name=run.name,
                stage_name=stages[run.stage_id].name,
                blueprint_hash=bp.content_hash()[:12],
                message=run.message,
                attempts=records,
                # the stage's step budget (a goal that studies the training steps gives each arm its own)
                budget_steps=bp.budget.steps,
                steps_done=steps,
                episodes=steps * int(pool.get("batch_size", 0)) * int(pool.get("group_size", 0)),
            )
        )
    return out
