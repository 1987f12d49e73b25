"""The main job on the embedded default: the reference case study (AgentJet appendix B, "minimum batch
size that still trains arithmetic") scaled to a 2-core CPU and SmolLM2-135M, in at most 20 minutes.

Scaling, said aloud: batch sizes 1 to 4 (8 replies each) instead of 1 to 64, 6 training steps per run,
held-out accuracy on 64 problems, one slot, and no secondary variable (the reference also asked whether
the response length changes the answer; that doubles every stage and does not fit 20 minutes here).
`benchmarks/demo_sweep.py` answers the same question by brute force (every arm, 3 seeds) with the same
job settings, built by the same `train_job`, so the campaign's conclusion can be checked against it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEMO_BUDGET", "DEMO_CAMPAIGN", "DEMO_GOAL", "DEMO_SETTINGS"]

DEMO_CAMPAIGN = "demo-min-batch-size"

DEMO_GOAL = "find the minimum batch size that still trains arithmetic (1 to 4)"

# TrainJob settings under which SmolLM2 learns arithmetic within a few steps on this CPU
# (docs/benchmarks/learning_arithmetic.md): the step-0 held-out accuracy is about 0.25 and 6 steps at
# lr 2e-5 lift it by about 0.15 to 0.2, far above the 64-item evaluation's noise.
DEMO_SETTINGS: tuple[str, ...] = (
    "swarm.model.name=smollm2-135m",
    "swarm.training.lr=2e-5",
    "swarm.pool.group_size=8",
    "temperature=0.8",
    "max_tokens=12",
    "eval_size=64",
    # no mid-run checkpoints: a 6-step run restarts faster than it writes 1.6 GB per step
    "swarm.training.checkpoint_every=0",
)

# ResearchBudget fields: calibration (3 seeds of batch size 4, pooled into that arm) and one grid stage
# (batch sizes 1 and 2, 3 seeds each), inside 18 minutes of run time so that the leader's own overhead
# still fits in 20. One research stage is one look: every decision is made at the full 95%.
DEMO_BUDGET: dict[str, Any] = {
    "steps": 6,
    "grid_points": 3,
    "max_stages": 1,
    "min_stages": 1,
    "max_runs": 9,
    "seeds": 3,
    "max_seeds": 5,
    "pilot_seeds": 3,
    "total_wall_s": 1080.0,
}
