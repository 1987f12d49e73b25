"""Training progress files of a `vibe train` run (pure reading and the flat-reward rule).

    RUN/rewards.jsonl  one line per step: step, reward_mean, reward_std, groups, flat_groups, components
    RUN/status.json    {"state": running|done|failed, "step", "steps", "flags": [...], "error"}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["FLAT_FLAG", "flat_streak", "read_rewards", "read_status"]

FLAT_FLAG = "no_reward_variance"


def flat_streak(records: list[dict[str, Any]]) -> int:
    """How many of the latest steps in a row had every group's rewards equal (no learning signal)."""
    n = 0
    for r in reversed(records):
        if r["groups"] and r["flat_groups"] == r["groups"]:
            n += 1
        else:
            break
    return n


def read_rewards(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "rewards.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_status(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "status.json"
    return json.loads(path.read_text()) if path.is_file() else None
