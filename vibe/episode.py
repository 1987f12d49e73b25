"""One episode of a client's `run`, as both the check's dry run and `vibe train` play it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from engine.client import Episode
from vibe.probes import total

__all__ = ["play"]


def play(run: Callable, ep: Episode, task: dict[str, Any], sampling: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """(reward, components) of one episode; raises ValueError for a reward that is not a finite number."""
    comps = run(ep.openai(max_retries=0), ep.model, task, dict(sampling))
    reward = total(comps)
    if not math.isfinite(reward):
        raise ValueError(f"reward is {reward} (components {comps})")
    return reward, {k: float(v) for k, v in comps.items()}
