"""What one attempt needs to run, written by the scheduler as `attempt.json` in the attempt directory.

The worker reads only this file (and, on local hosts, the store named by `db_path`), so the same worker
runs locally and on an ssh host where the store is out of reach. Paths are as seen on the attempt's host.

Attempt directory layout (`<run_dir>/attempts/<n>/`):
    attempt.json    this spec
    log.txt         the job's stdout+stderr
    metrics.jsonl   A3R_METRICS_FILE, appended by the job
    heartbeat.json  written by the worker every heartbeat (seq, pids, state)
    result.json     written by the worker when the job ends (state, exit code, failure kind, log tail)
The run directory holds blueprint.md, config.yaml, run.sh and checkpoints/ (shared by all attempts).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from a3r.worker.files import HEARTBEAT_FILE, METRICS_FILE, SPEC_FILE

__all__ = ["AttemptSpec"]


@dataclass(frozen=True)
class AttemptSpec:
    """A plain dataclass, not pydantic: the worker starts once per attempt and must start fast. The
    scheduler writes it; `read` checks field names and types."""

    run_id: int
    attempt_id: int
    attempt_number: int
    run_dir: str
    attempt_dir: str
    seed: int
    budget_steps: int
    wall_time_s: float
    heartbeat_s: float
    command: list[str] = field(default_factory=lambda: ["bash", "run.sh"])  # run in run_dir
    env: dict[str, str] = field(default_factory=dict)  # extra job env, e.g. CUDA_VISIBLE_DEVICES
    kill_grace_s: float = 5.0
    log_tail_lines: int = 40
    db_path: str | None = None  # the store the worker writes to; None: files only (ssh hosts)

    def path(self, name: str) -> Path:
        return Path(self.attempt_dir) / name

    @property
    def checkpoint_dir(self) -> str:
        return f"{self.run_dir}/checkpoints"

    def job_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The job's environment: `base` (default os.environ) + the A3R contract variables + `env`."""
        env = dict(os.environ if base is None else base)
        env.update(
            {
                "A3R_RUN_ID": str(self.run_id),
                "A3R_ATTEMPT": str(self.attempt_number),
                "A3R_RUN_DIR": self.run_dir,
                "A3R_METRICS_FILE": str(self.path(METRICS_FILE)),
                "A3R_CHECKPOINT_DIR": self.checkpoint_dir,
                "A3R_HEARTBEAT_FILE": str(self.path(HEARTBEAT_FILE)),
                "A3R_SEED": str(self.seed),
                "A3R_BUDGET_STEPS": str(self.budget_steps),
                "PYTHONUNBUFFERED": "1",  # a Python job's output reaches the log and pane as it happens
            }
        )
        env.update(self.env)
        return env

    @classmethod
    def from_json(cls, text: str) -> AttemptSpec:
        data = json.loads(text)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) - set(fields):
            raise ValueError(f"attempt spec has unknown fields: {sorted(set(data) - set(fields))}")
        spec = cls(**data)
        for name in ("run_id", "attempt_id", "attempt_number", "seed", "budget_steps", "log_tail_lines"):
            if not isinstance(getattr(spec, name), int):
                raise ValueError(f"attempt spec field {name} must be an integer")
        return spec

    @classmethod
    def read(cls, attempt_dir: str | Path) -> AttemptSpec:
        return cls.from_json((Path(attempt_dir) / SPEC_FILE).read_text())

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)
