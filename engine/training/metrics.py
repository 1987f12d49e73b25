"""Per-step training metrics as JSONL: in the run dir, and in A3R's metrics file when a worker runs us."""

from __future__ import annotations

import json
import os
from pathlib import Path


class MetricsLog:
    def __init__(self, run_dir: str | Path | None) -> None:
        self.paths: list[Path] = []
        if run_dir is not None:
            self.paths.append(Path(run_dir) / "metrics.jsonl")
        extra = os.environ.get("A3R_METRICS_FILE")
        if extra:
            self.paths.append(Path(extra))

    def write(self, record: dict) -> None:
        line = json.dumps(record) + "\n"
        for p in self.paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "a", encoding="utf-8") as f:
                f.write(line)


def reward_by_client(batch) -> dict[str, float]:
    """`reward/<client_id>`: mean reward of each client's episodes in a batch. In a cocktail (task mix)
    each task runs as its own client, so these are the per-task reward curves."""
    by: dict[str, list[float]] = {}
    for e in batch:
        by.setdefault(e.client_id, []).append(e.reward)
    return {f"reward/{c}": sum(r) / len(r) for c, r in sorted(by.items())}
