"""What a run costs, before it ran: a cost model measured on the 2-core CPU machine this project is
developed on. Seconds to start a run (server subprocess, model load), seconds per training step as a base
plus a share per episode, and seconds per held-out item evaluated.

The planner shows an ETA from it before anything runs; the calibration stage then measures the real cost
of the reference configuration and scales the model by the ratio (`scale`), so arms that are cheaper or
dearer than the reference (a smaller batch, shorter replies) are still estimated in proportion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a3r.leader.knobs import get_dotted

__all__ = ["RUN_COST", "RunCost", "run_seconds"]


@dataclass(frozen=True)
class RunCost:
    """Seconds a run costs on one slot: start + steps * (step + per_episode * episodes) + items * per_item
    + checkpoints * per_checkpoint."""

    start: float
    step: float
    per_episode: float
    per_item: float
    per_checkpoint: float  # weights + optimizer state written and fsynced (engine.training.checkpoint)


# Measured with `swarm train` on a 2-core AMD EPYC container (torch 2.13 CPU): SmolLM2 takes about 15 s to
# start, 3 s for a step of 8 episodes and 9 s for 32 (12-token replies), 11 s to evaluate 64 items.
# A checkpoint (full weights + AdamW state, written and fsynced by engine.training.checkpoint, every step by
# default), timed the way benchmarks/checkpoint_cost.py does on the same container under load: SmolLM2 7.9
# to 11.3 s over 4 saves (load average 14), tiny 0.56 to 0.63 s (load average 11). Issue 25's campaigns ran 334 and 383 s per run
# where the model without checkpoints said 170 s at 20 steps: about 8 s a step unexplained, the checkpoint.
RUN_COST: dict[str, RunCost] = {
    "smollm2-135m": RunCost(start=15.0, step=1.0, per_episode=0.25, per_item=0.17, per_checkpoint=8.0),
    "tiny": RunCost(start=4.0, step=0.1, per_episode=0.01, per_item=0.005, per_checkpoint=0.6),
}


def run_seconds(job: dict[str, Any], steps: int) -> float | None:
    """Prior wall seconds of one run of `job` at `steps` steps (the job's own max_steps when it sets one:
    a goal may study the steps), or None without a prior for its model. Counts the evaluations (step 0,
    every eval_every, the end) and the checkpoints (every checkpoint_every steps, the engine's default 1)."""
    cost = RUN_COST.get(str(get_dotted(job, "swarm.model.name", "")))
    if cost is None:
        return None
    steps = int(get_dotted(job, "swarm.training.max_steps", None) or steps)
    every = int(get_dotted(job, "swarm.training.checkpoint_every", 1) or 0)
    checkpoints = steps // every if every else 0
    episodes = int(get_dotted(job, "swarm.pool.batch_size", 4)) * int(
        get_dotted(job, "swarm.pool.group_size", 4)
    )
    evals = 2 + (steps // job["eval_every"] - 1 if job.get("eval_every") else 0)
    items = int(job.get("eval_size", 0)) * evals
    return (
        cost.start
        + steps * (cost.step + cost.per_episode * episodes)
        + items * cost.per_item
        + checkpoints * cost.per_checkpoint
    )
