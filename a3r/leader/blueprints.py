"""Turn a stage design into execution-plane blueprints, one per arm, each carrying an engine TrainJob.

The job is built as data (base job <- goal's fixed settings <- the arm's values <- the step budget),
validated by the engine's own `engine.jobs.TrainJob` before anything is dispatched (so a bad design fails
here, with the engine's message, instead of in every run), and stored fully expanded: a blueprint
replays the same configuration even if the engine's defaults change later.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from a3r.blueprints import Blueprint, Budget, deep_merge
from a3r.leader.design import Arm, StageDesign, arm_label
from a3r.leader.goals import Goal
from a3r.leader.knobs import set_dotted, set_knob_value

__all__ = ["DEFAULT_BASE_JOB", "LAUNCH_COMMAND", "DesignError", "stage_blueprints", "train_job"]

# What every run of a user's goal does unless the goal, --model or --set say otherwise: it trains the real
# embedded model (SmolLM2-135M; `tiny` is a random-weight test fixture that cannot learn), and is scored by
# greedy accuracy on a fixed held-out set of 64 problems at step 0 and at the end (the training reward of
# a few sampled episodes per step is too noisy to separate arms). Checkpoints on a time basis, at most one
# per CHECKPOINT_EVERY_S: a crashed attempt resumes from the last one and retrains at most that long plus
# one step (the pool's journal keeps the episodes), where a checkpoint every step wrote 1.6 GB of SmolLM2
# weights and AdamW state per step. None at the end, and all deleted once the run succeeds: a campaign of
# 20 SmolLM2 runs would otherwise leave 60 GB behind.
CHECKPOINT_EVERY_S = 120.0
DEFAULT_BASE_JOB: dict[str, Any] = {
    "eval_size": 64,
    "concurrency": 32,
    "keep_final_checkpoint": False,
    "swarm": {
        "model": {"name": "smollm2-135m"},
        "training": {"checkpoint_every": 1, "checkpoint_every_s": CHECKPOINT_EVERY_S},
    },
}


# The engine keeps its own files (SwarmConfig `config.yaml`, checkpoints, metrics.jsonl, server.log) in its
# run dir and re-reads them on restart, so it gets the attempt-stable checkpoint dir, never the A3R run dir,
# whose `config.yaml` is the TrainJob rendered from the blueprint.
LAUNCH_COMMAND = 'swarm train --config config.yaml --run-dir "$A3R_CHECKPOINT_DIR"'


class DesignError(ValueError):
    """A designed configuration is not a valid engine job; the message carries the engine's reason."""


def train_job(goal: Goal, arm: Arm, steps: int, base_job: dict[str, Any] | None = None) -> dict[str, Any]:
    """The validated, fully expanded TrainJob data for one arm."""
    from engine.jobs import TrainJob

    data = deep_merge(DEFAULT_BASE_JOB if base_job is None else base_job, {})
    if goal.factor.key != "task":
        data["task"] = goal.task
    # the stage's steps first: a goal that studies (or fixes) the training steps sets its own
    set_dotted(data, "swarm.training.max_steps", steps)
    for key, value in goal.fixed.items():
        if _is_knob(key):
            set_knob_value(data, key, value)
        else:
            set_dotted(data, key, value)
    set_knob_value(data, goal.factor.key, arm.x)
    if goal.secondary is not None:
        set_knob_value(data, goal.secondary.key, arm.level)
    if goal.statistic == "auc" and data.get("eval_size") and not data.get("eval_every") and steps >= 4:
        # speed of learning is the area under the held-out curve: it needs points between start and end
        data["eval_every"] = steps // 4
    _one_update_per_step(data)
    try:
        job = TrainJob.model_validate(data)
    except (ValidationError, ValueError) as e:
        raise DesignError(f"arm {arm_label(goal, arm.x, arm.level)} is not a valid engine job: {e}") from None
    return job.model_dump(mode="json")


def _is_knob(key: str) -> bool:
    """Whether a fixed setting is a knob (the settings knobs require, such as team.agents, are not)."""
    from a3r.leader.knobs import get_knob

    try:
        get_knob(key)
    except KeyError:
        return False
    return True


def _one_update_per_step(data: dict[str, Any]) -> None:
    """Unless set, one optimizer step per training step over the whole pooled batch (B x N samples):
    with a fixed mini-batch a batch-size arm would also change how many updates a step makes."""
    from engine.config import SwarmConfig

    defaults = SwarmConfig()
    pool = (data.get("swarm") or {}).get("pool") or {}
    samples = int(pool.get("batch_size", defaults.pool.batch_size)) * int(
        pool.get("group_size", defaults.pool.group_size)
    )
    training = data.setdefault("swarm", {}).setdefault("training", {})
    training.setdefault("mini_batch_size", samples)
    training.setdefault("micro_batch_size", min(8, training["mini_batch_size"]))


def stage_blueprints(
    goal: Goal, design: StageDesign, *, base_job: dict[str, Any] | None = None, wall_time_s: float = 3600.0
) -> list[Blueprint]:
    """One blueprint per arm of the stage, in the design's order."""
    out = []
    for arm in design.arms:
        label = arm_label(goal, arm.x, arm.level)
        job = train_job(goal, arm, design.steps, base_job)
        out.append(
            Blueprint(
                name=label,
                purpose=f"{design.purpose} This arm ({label}): {arm.why}.",
                hypothesis=design.hypothesis,
                engine_config=job,
                task=job["task"],
                seeds=arm.seeds,
                seed_path="seed",
                budget=Budget(steps=design.steps, wall_time_s=wall_time_s),
                metrics=[goal.metric],
                success_criteria=_success(goal),
                launch_command=LAUNCH_COMMAND,
            )
        )
    return out


def _success(goal: Goal) -> str:
    if goal.shape in ("minimum", "maximum"):
        return (
            f"The run finishes all steps; the arm passes if its {goal.statistic} {goal.metric} "
            + goal.criterion.describe(goal.metric)
            + "."
        )
    return (
        f"The run finishes all steps; arms are compared by their {goal.statistic} {goal.metric} and its gain over the "
        "untrained level, with Student-t intervals."
    )
