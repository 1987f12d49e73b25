"""Training progress files of a `vibe train` run (pure reading and the flat-reward rule).

    RUN/rewards.jsonl  one line per step: step, reward_mean, reward_std, groups, flat_groups, components,
                       and `roles` (role -> components) for a client with ROLES;
                       a step the server trained from episodes replayed out of its pool journal after a
                       restart (not played by this invocation) has `replayed: true`, the server's reward
                       figures and no groups or components
    RUN/status.json    {"state": running|done|failed, "step", "steps", "flags": [...], "error"}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["FLAT_FLAG", "flat_streak", "read_rewards", "read_status", "replayed_rows"]

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


def replayed_rows(before: int, after: int, server_metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for the steps before+1 .. after-1 that the server trained while this client played one step.

    After a restart the server's pool journal gives back the episodes of a batch that was taken but not yet
    trained, so the server trains that step on its own and the client's plays land in the next one. The
    client saw none of those episodes: their rows carry the server's reward figures (`metrics.jsonl`) and
    `replayed: true`, and no groups, so `flat_streak` does not count them either way."""
    by_step = {int(m["step"]): m for m in server_metrics if "step" in m}
    return [
        {
            "step": k,
            "reward_mean": float(by_step[k]["reward_mean"]),
            "reward_std": float(by_step[k].get("reward_std", 0.0)),
            "episodes": int(by_step[k].get("episodes", 0)),
            "failed": 0,
            "groups": 0,
            "flat_groups": 0,
            "components": {},
            "replayed": True,
        }
        for k in range(before + 1, after)
        if k in by_step
    ]


def read_rewards(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "rewards.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_status(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "status.json"
    return json.loads(path.read_text()) if path.is_file() else None
