"""`swarm train`'s entry point: a job trains on one server it owns (`engine.jobs`) or as a team of servers
(`engine.teams`). Choosing here, above both, keeps the team loop (which reuses the single-server job's pieces)
and the single-server loop free of imports of each other."""

from __future__ import annotations

from pathlib import Path

from engine.jobs import TrainJob, train_single
from engine.teams.train import train_team


def train(job: TrainJob, run_dir: Path) -> dict:
    """Run `job` to its `swarm.training.max_steps` in `run_dir` and return its summary."""
    return train_team(job, run_dir) if job.team is not None else train_single(job, run_dir)
