"""What a run costs, before it ran: a cost model in the terms `benchmarks/run_cost.py` measures a run in.

    wall = start                                        process start, imports, server start, model load,
                                                        and the run's end (summary, server stop)
         + steps * (sample_step + update_step           per training step, fixed
                    + (sample_token + update_token)     per episode-token: E = batch_size * group_size
                      * E * T)                          episodes of at most T = max_tokens reply tokens
         + items * per_item                             held-out evaluation (step 0, every eval_every, the end;
                                                        step 0 only where the run misses the step-0 cache)
         + writes * per_checkpoint                      checkpoint writes the job's policy makes (see below)

A run is priced at its slot's thread count (`run_seconds(..., threads=)`): the constants of a run owning the
whole host (`RUN_COST`) and, where measured, those of a 1-thread run beside another (`RUN_COST_THREADS`).
A stage's wall time is the schedule of its runs over the slots (`schedule_seconds`: each run starts on the
first slot to come free, as the scheduler dispatches them), not their sum divided by the slots.

The planner shows an ETA from it before anything runs; the calibration stage then measures the real cost
of the reference configuration and scales the model by the ratio (`scale`), so arms that are cheaper or
dearer than the reference (a smaller batch, shorter replies) are still estimated in proportion. A run's
measured breakdown maps term for term onto `RunCost` (`fit_run_cost`, which `run_cost.py` prints as the
line to paste into `RUN_COST`), so a plan's ETA can be checked against the measured wall time.

The step-0 evaluation is cached (`engine.training.eval_cache`, docs/engine.md "The step-0 evaluation cache"):
a run whose key (`eval0_key`: model, held-out set, generation settings, threads) an earlier run already
evaluated reuses that result and pays no step-0 evaluation. `schedule_runs` prices a stage that way: a run
pays it when no run of its key was evaluated before the stage and none that started earlier in the stage
had stored its entry (its start plus its step-0 evaluation) by the time this one starts; in practice the
first round of runs on the slots, which start together, pays it once per slot, and the rest reuse it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from a3r.leader.knobs import get_dotted
from engine.training.checkpoint import checkpoint_due

__all__ = [
    "FINAL_WRITE_SHARE",
    "RUN_COST",
    "RUN_COST_THREADS",
    "RunCost",
    "PricedRun",
    "Schedule",
    "checkpoint_writes",
    "cost_of",
    "episode_tokens",
    "eval0_key",
    "fit_run_cost",
    "price_run",
    "run_seconds",
    "runs_within",
    "schedule_runs",
    "schedule_seconds",
]


@dataclass(frozen=True)
class RunCost:
    """Seconds a run costs on one slot, by term (see the module docstring). Each maps onto a figure of
    `benchmarks/run_cost.py` (`fit_run_cost` does the division)."""

    start: float  # process_s + imports_s + server_s + load_s + other_s
    sample_step: float  # sample_s per step not proportional to the step's episode-tokens
    sample_token: float  # the rest of sample_s per step, per episode-token (E * T)
    update_step: float  # update_s per step not proportional to episode-tokens (the optimizer step)
    update_token: float  # the rest of update_s per step, per episode-token
    per_item: float  # eval_s per held-out item
    per_checkpoint: float  # checkpoint_s per full write (weights + optimizer state, fsynced)

    def step_seconds(self, episode_tokens: int) -> float:
        """Pure: one training step's sampling and update for `episode_tokens` = E * T."""
        return self.sample_step + self.update_step + (self.sample_token + self.update_token) * episode_tokens


# The max_steps checkpoint holds the weights only: AdamW keeps two fp32 moments per weight, so the weights
# are a third of a full fine-tune checkpoint's bytes.
FINAL_WRITE_SHARE = 1.0 / 3.0

# The fixed part of an update: the optimizer step over all of SmolLM2-135M's weights (fused AdamW and
# gradient clipping, about 0.2-0.3 s on the 2-core container: engine.backends.torch.trainer.adamw), which
# does not grow with the batch. Sampling gets no fixed part from one run shape: a run at a second
# batch size or max_tokens would split it (its intercept), until then it is all per episode-token.
SMOLLM2_UPDATE_STEP_S = 0.3

# Held-out evaluation seconds per item of SmolLM2-135M, whole host and one thread per slot. The 1-thread one
# is refitted (below, RUN_COST_THREADS) from the quiet measurement after evaluations filled the server's
# decode batch (64 rows instead of the job's `concurrency` of 32: docs/benchmarks/run_startup.md): 0.2926 s
# per item before, 0.1495 after. The whole-host one was measured before that change and is likely high: no
# quiet one-slot run of this tree has been measured since; refit it from the `per_item=` of the line
# `python benchmarks/run_cost.py --shape default --repeats 3` prints.
SMOLLM2_EVAL_PER_ITEM_S = 0.1586
SMOLLM2_1T_EVAL_PER_ITEM_S = 0.1495

# All measured constants, one line per model. SmolLM2-135M: the median of three quiet one-slot runs of this
# tree (shared update passes) in `benchmarks/run_cost.py --shape default --slots --main-commit c04b1a9
# --repeats 3` (docs/benchmarks/run_cost_slots_vs_main.json, 2-core AMD EPYC container, torch 2.13 CPU, load
# 1.8-2.4 around it): 170.1 s wall; start 11.38 s (process + imports + server + load + other), sampling
# 74.46 s and update 58.14 s over 20 steps of 16 episodes x 32 max_tokens (512 episode-tokens), of which the
# optimizer 0.275 s per step, evaluation 20.30 s for 128 items, one checkpoint write 2.40 s. To recalibrate,
# run `python benchmarks/run_cost.py --shape default --repeats 3` on a quiet machine and paste the
# `RUN_COST["smollm2-135m"] = ...` line it prints (fit_run_cost of the median run) over the one below.
# The constants are for one slot owning both cores; a 1-thread slot's run is in RUN_COST_THREADS.
# tiny: a prior for the test fixture (random weights, 2 layers), not measured at this breakdown.
RUN_COST: dict[str, RunCost] = {
    "smollm2-135m": RunCost(
        start=11.38,
        sample_step=0.0,
        sample_token=0.007272,
        update_step=0.2748,
        update_token=0.005142,
        per_item=SMOLLM2_EVAL_PER_ITEM_S,
        per_checkpoint=2.402,
    ),
    "tiny": RunCost(
        start=4.0,
        sample_step=0.0,
        sample_token=0.0002,
        update_step=0.02,
        update_token=0.0001,
        per_item=0.005,
        per_checkpoint=0.6,
    ),
}


# Runs of one thread each, measured two at a time on the 2-core host (A3R's default there: one 1-thread slot
# per core, `a3r.config.local_host`). SmolLM2-135M: `fit_run_cost` of the mean of the two runs of the median
# 2x1 round (repeat 2: 199.6 and 202.9 s, round wall 202.9 s) of `benchmarks/run_cost.py --shape default
# --slots --main-commit c04b1a9 --layouts 2x1 --repeats 3` (docs/benchmarks/run_cost_slots_vs_main_2.json,
# 2026-12-02 13:24-13:47, quiet, load 1.2-5.2: the runs' own servers and clients). Both runs of that round
# reused the cached step-0 evaluation (64 items evaluated each, not 128); the optimizer's 0.295 s per step is
# its measured `train_optimizer_s` / 20. Checked out of sample against repeat 1 (warm, 202.4 s) and repeat 0
# (cold: both runs evaluated step 0, 214.6 s); tests/a3r_leader/test_costs.py reads the JSON.
RUN_COST_THREADS: dict[tuple[str, int], RunCost] = {
    ("smollm2-135m", 1): RunCost(
        start=7.632,
        sample_step=0.0,
        sample_token=0.009567,
        update_step=0.2952,
        update_token=0.007227,
        per_item=SMOLLM2_1T_EVAL_PER_ITEM_S,
        per_checkpoint=3.306,
    ),
}


def cost_of(model: str, threads: int | None = None) -> RunCost | None:
    """The constants a run of `model` costs at `threads` threads per run: the measured entry for that
    thread count, else the whole-host one (`RUN_COST`: a model measured only there, or a slot that takes
    all cores); None without a prior for the model."""
    if threads is not None and (model, threads) in RUN_COST_THREADS:
        return RUN_COST_THREADS[(model, threads)]
    return RUN_COST.get(model)


def schedule_seconds(runs_s: list[float], slots: int) -> float:
    """Pure: wall seconds of `runs_s` on `slots` slots, each run started in order on the first slot to come
    free (the scheduler's FIFO dispatch): 3 equal runs on 2 slots take two runs' time, not one and a half."""
    free = [0.0] * max(1, slots)
    for s in runs_s:
        i = free.index(min(free))
        free[i] += s
    return max(free)


def runs_within(wall_s: float, run_s: float, slots: int) -> int:
    """Pure: runs of `run_s` seconds that finish within `wall_s` on `slots` slots (whole rounds per slot)."""
    if run_s <= 0:
        raise ValueError(f"run_s must be positive, got {run_s}")
    return max(0, math.floor(wall_s / run_s)) * max(1, slots)


def episode_tokens(job: dict[str, Any]) -> int:
    """Pure: a step's episodes times the reply budget, E * T (the engine's defaults where the job sets none:
    batch 4 x group 4, max_tokens 32)."""
    episodes = int(get_dotted(job, "swarm.pool.batch_size", 4)) * int(
        get_dotted(job, "swarm.pool.group_size", 4)
    )
    return episodes * int(job.get("max_tokens") or 32)


def fit_run_cost(
    breakdown: dict[str, float],
    *,
    steps: int,
    episode_tokens: int,
    eval_items: int,
    checkpoint_writes: float,
    update_step: float,
    sample_step: float = 0.0,
) -> RunCost:
    """Pure: the `RunCost` that reproduces one measured run's breakdown exactly (`benchmarks/run_cost.py`'s
    summed terms: process_s, imports_s, server_s, load_s, other_s, sample_s, update_s, eval_s,
    checkpoint_s). The fixed per-step parts are given (one run cannot split an intercept from a slope);
    the rest of each step's sampling and update is per episode-token."""
    start = sum(breakdown[k] for k in ("process_s", "imports_s", "server_s", "load_s", "other_s"))
    return RunCost(
        start=start,
        sample_step=sample_step,
        sample_token=(breakdown["sample_s"] / steps - sample_step) / episode_tokens,
        update_step=update_step,
        update_token=(breakdown["update_s"] / steps - update_step) / episode_tokens,
        per_item=breakdown["eval_s"] / eval_items if eval_items else 0.0,
        per_checkpoint=breakdown["checkpoint_s"] / checkpoint_writes if checkpoint_writes else 0.0,
    )


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
    server's clock starts once the model is loaded, so it runs through the step-0 evaluation
    (`eval_s_at[0]`) and every later one. A write itself is not counted on the clock (the engine restarts
    it after the write)."""
    writes, since = 0, eval_s_at.get(0, 0.0)
    for k in range(1, steps + 1):
        since += step_s
        if k < steps and checkpoint_due(
            k,
            every_steps=every_steps,
            every_s=every_s,
            seconds_since_last=since,
            max_steps=steps,
            final=final,
        ):
            writes, since = writes + 1, 0.0
        since += eval_s_at.get(k, 0.0)
    ends_written = checkpoint_due(
        steps,
        every_steps=every_steps,
        every_s=every_s,
        seconds_since_last=since,
        max_steps=steps,
        final=final,
    )
    return writes, ends_written


def eval0_key(job: dict[str, Any], threads: int | None = None) -> str | None:
    """Pure: what decides whether two runs share a step-0 evaluation, from the job's side of the engine's key
    (`engine.training.eval_cache.step0_key`: model, LoRA, inference and episode settings, task(s), held-out
    size and seed, max_tokens, concurrency) and the slot's thread count; the machine, versions and code are
    the same for every run of a campaign. None where the run never reuses one: no held-out set, the cache
    turned off (`eval0_cache: false`), a team or a backend other than torch (the engine caches neither).
    Fields a job leaves at the engine's default count as different from the same value written out, so a
    run is at worst priced as a miss it would not be."""
    swarm = job.get("swarm") or {}
    if (
        not int(job.get("eval_size") or 0)
        or job.get("eval0_cache") is False
        or swarm.get("collaboration")
        or swarm.get("backend", "torch") != "torch"
    ):
        return None
    parts = {k: swarm.get(k) for k in ("model", "lora", "inference", "episodes")}
    parts |= {k: job.get(k) for k in ("task", "mix", "eval_size", "eval_seed", "max_tokens", "concurrency")}
    return json.dumps([parts, threads], sort_keys=True, default=str)


@dataclass(frozen=True)
class PricedRun:
    """One run as the cost model prices it: its wall seconds when it pays its step-0 evaluation
    (`seconds`) and when it reuses it (`reused_s`), when its step-0 entry is stored after the run starts
    (`stored_after_s`: start-up plus that evaluation), and its step-0 key (`eval0_key`; None: never reused)."""

    seconds: float
    reused_s: float
    stored_after_s: float
    key: str | None


@dataclass(frozen=True)
class Schedule:
    """A stage's runs on the slots: its wall seconds, which runs pay the step-0 evaluation (in submission
    order), and the step-0 keys evaluated once it is over (the next stage's `evaluated`)."""

    wall_s: float
    pays_eval0: list[bool]
    evaluated: frozenset[str]


def schedule_runs(runs: list[PricedRun], slots: int, evaluated: frozenset[str] = frozenset()) -> Schedule:
    """Pure: `runs` on `slots` slots in submission order, each on the first slot to come free (as
    `schedule_seconds`), each paying its step-0 evaluation unless its key is in `evaluated` (an earlier
    stage measured it) or an earlier-started run of its key had stored its entry when this one starts."""
    free = [0.0] * max(1, slots)
    stored = dict.fromkeys(evaluated, 0.0)  # key -> when its entry exists
    pays: list[bool] = []
    for r in runs:
        i = free.index(min(free))
        t = free[i]
        miss = r.key is None or stored.get(r.key, math.inf) > t
        if miss and r.key is not None:
            stored[r.key] = min(stored.get(r.key, math.inf), t + r.stored_after_s)
        free[i] = t + (r.seconds if miss else r.reused_s)
        pays.append(miss)
    return Schedule(max(free), pays, frozenset(stored))


def price_run(job: dict[str, Any], steps: int, threads: int | None = None) -> PricedRun | None:
    """One run of `job` priced both ways (`run_seconds` with and without its step-0 evaluation), or None
    without a prior for its model."""
    cost = cost_of(str(get_dotted(job, "swarm.model.name", "")), threads)
    paid, reused = run_seconds(job, steps, threads), run_seconds(job, steps, threads, eval0=False)
    if cost is None or paid is None or reused is None:
        return None
    eval0_s = int(job.get("eval_size", 0)) * cost.per_item
    return PricedRun(paid, reused, cost.start + eval0_s, eval0_key(job, threads))


def run_seconds(job: dict[str, Any], steps: int, threads: int | None = None, eval0: bool = True) -> float | None:
    """Prior wall seconds of one run of `job` at `steps` steps (the job's own max_steps when it sets one:
    a goal may study the steps) in a slot of `threads` threads (None: the slot owns the host; `cost_of`),
    or None without a prior for its model. Counts the evaluations (step 0 unless `eval0` is False: the run
    reuses a cached one, every eval_every, the end) and the checkpoint writes the engine's rule makes
    (`checkpoint_writes`)."""
    cost = cost_of(str(get_dotted(job, "swarm.model.name", "")), threads)
    if cost is None:
        return None
    steps = int(get_dotted(job, "swarm.training.max_steps", None) or steps)
    step_s = cost.step_seconds(episode_tokens(job))
    eval_items = int(job.get("eval_size", 0))
    every = int(job.get("eval_every") or 0)
    mid_evals = [k for k in range(1, steps) if every and k % every == 0]
    items = eval_items * (1 + int(eval0) + len(mid_evals))
    writes, ends_written = checkpoint_writes(
        steps,
        step_s,
        # a reused step-0 result takes no time on the checkpoint clock
        {k: eval_items * cost.per_item for k in [0, *mid_evals] if k or eval0},
        int(get_dotted(job, "swarm.training.checkpoint_every", 1) or 0),
        float(get_dotted(job, "swarm.training.checkpoint_every_s", 0.0) or 0.0),
        # swarm train turns the final write off for a job that deletes its checkpoints (TrainJob.server_config)
        bool(job.get("keep_final_checkpoint", True))
        and bool(get_dotted(job, "swarm.training.final_checkpoint", True)),
    )
    checkpoints = writes + (FINAL_WRITE_SHARE if ends_written else 0.0)
    return cost.start + steps * step_s + items * cost.per_item + checkpoints * cost.per_checkpoint
