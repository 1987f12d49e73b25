"""What a run costs, before it ran: a cost model in the terms `benchmarks/run_cost.py` measures a run in.

    wall = start                                  process start and model load
         + steps * (step + per_episode * B * N)   sampling and the update, per training step
         + items * per_item                       held-out evaluation (step 0, every eval_every, the end)
         + writes * per_checkpoint                checkpoint writes the job's policy makes (see below)

The planner shows an ETA from it before anything runs; the calibration stage then measures the real cost
of the reference configuration and scales the model by the ratio (`scale`), so arms that are cheaper or
dearer than the reference (a smaller batch, shorter replies) are still estimated in proportion. A run's
measured breakdown (run_cost.py's process, imports, server and model load for `start`, `sample_s +
update_s` per step, `eval_s` per item, `checkpoint_s` per write) maps term for term onto `RunCost`, so a
plan's ETA can be checked against the measured wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a3r.leader.knobs import get_dotted
from engine.training.checkpoint import checkpoint_due

__all__ = ["FINAL_WRITE_SHARE", "RUN_COST", "RunCost", "checkpoint_writes", "run_seconds"]


@dataclass(frozen=True)
class RunCost:
    """Seconds a run costs on one slot, by term (see the module docstring)."""

    start: float
    step: float
    per_episode: float
    per_item: float
    per_checkpoint: float  # weights + optimizer state written and fsynced (engine.training.checkpoint)


# The max_steps checkpoint holds the weights only: AdamW keeps two fp32 moments per weight, so the weights
# are a third of a full fine-tune checkpoint's bytes.
FINAL_WRITE_SHARE = 1.0 / 3.0

# Measured with `swarm train` on a 2-core AMD EPYC container (torch 2.13 CPU): SmolLM2 takes about 15 s to
# start, 3 s for a step of 8 episodes and 9 s for 32 (12-token replies), 11 s to evaluate 64 items.
# A checkpoint (full weights + AdamW state, written and fsynced by engine.training.checkpoint), timed the
# way benchmarks/checkpoint_cost.py does on the same container under load: SmolLM2 7.9 to 11.3 s over 4
# saves (load average 14), tiny 0.56 to 0.63 s (load average 11). Issue 25's campaigns ran 334 and 383 s
# per run where the model without checkpoints said 170 s at 20 steps: about 8 s a step unexplained, the
# checkpoint every step that A3R's default run wrote then.
RUN_COST: dict[str, RunCost] = {
    "smollm2-135m": RunCost(start=15.0, step=1.0, per_episode=0.25, per_item=0.17, per_checkpoint=8.0),
    "tiny": RunCost(start=4.0, step=0.1, per_episode=0.01, per_item=0.005, per_checkpoint=0.6),
}


def checkpoint_writes(
    steps: int,
    step_s: float,
    eval_s_at: dict[int, float],
    every_steps: int,
    every_s: float,
    final: bool,
) -> tuple[int, bool]:
    """(writes before max_steps, whether max_steps writes) of a run whose steps take `step_s` each and whose
    evaluations after step k take `eval_s_at[k]`, under the engine's own rule (`checkpoint_due`): the
    server's clock runs through evaluations too. A write itself is not counted on the clock (the engine
    restarts it after the write)."""
    writes, since = 0, 0.0
    for k in range(1, steps + 1):
        since += step_s
        if k < steps and checkpoint_due(
            k, every_steps=every_steps, every_s=every_s, seconds_since_last=since, max_steps=steps, final=final
        ):
            writes, since = writes + 1, 0.0
        since += eval_s_at.get(k, 0.0)
    ends_written = checkpoint_due(
        steps, every_steps=every_steps, every_s=every_s, seconds_since_last=since, max_steps=steps, final=final
    )
    return writes, ends_written


def run_seconds(job: dict[str, Any], steps: int) -> float | None:
    """Prior wall seconds of one run of `job` at `steps` steps (the job's own max_steps when it sets one:
    a goal may study the steps), or None without a prior for its model. Counts the evaluations (step 0,
    every eval_every, the end) and the checkpoint writes the engine's rule makes (`checkpoint_writes`)."""
    cost = RUN_COST.get(str(get_dotted(job, "swarm.model.name", "")))
    if cost is None:
        return None
    steps = int(get_dotted(job, "swarm.training.max_steps", None) or steps)
    episodes = int(get_dotted(job, "swarm.pool.batch_size", 4)) * int(
        get_dotted(job, "swarm.pool.group_size", 4)
    )
    step_s = cost.step + cost.per_episode * episodes
    eval_items = int(job.get("eval_size", 0))
    every = int(job.get("eval_every") or 0)
    mid_evals = [k for k in range(1, steps) if every and k % every == 0]
    items = eval_items * (2 + len(mid_evals))
    writes, ends_written = checkpoint_writes(
        steps,
        step_s,
        {k: eval_items * cost.per_item for k in mid_evals},
        int(get_dotted(job, "swarm.training.checkpoint_every", 1) or 0),
        float(get_dotted(job, "swarm.training.checkpoint_every_s", 0.0) or 0.0),
        # swarm train turns the final write off for a job that deletes its checkpoints (TrainJob.server_config)
        bool(job.get("keep_final_checkpoint", True))
        and bool(get_dotted(job, "swarm.training.final_checkpoint", True)),
    )
    checkpoints = writes + (FINAL_WRITE_SHARE if ends_written else 0.0)
    return cost.start + steps * step_s + items * cost.per_item + checkpoints * cost.per_checkpoint
