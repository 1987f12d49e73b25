"""One task played by a client, as both the check's dry run and `vibe train` play it.

A client without `ROLES` plays one episode per task: `run(llm, model, task, sampling)` gets the
episode's OpenAI client and returns {component: value}. A client with `ROLES = ["a", "b", ...]` (a
multi-agent game whose roles share the server's model) gets {role: OpenAI client} as `llm`, one episode
per role, and returns {role: {component: value}}; the role episodes have task ids `<task id>:<role>` (so
each role forms its own groups) and commit or abort together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from engine.client import EpisodeGroup, SwarmClient
from vibe.probes import total

__all__ = ["play_task"]

Record = dict[str, Any]  # {"task_id": ..., "components": {name: value}, "accepted": bool}


def _finite(reward: float, comps: Any) -> float:
    if not math.isfinite(reward):
        raise ValueError(f"reward is {reward} (components {comps})")
    return reward


def play_task(client: SwarmClient, run: Callable, roles: Sequence[str], task_id: str, task: dict[str, Any],
              sampling: dict[str, Any]) -> list[Record]:
    """Play `task` once (one episode, or one per role) and end the episode(s) with the reward(s)."""
    if not roles:
        with client.episode(task_id) as ep:
            comps = run(ep.openai(max_retries=0), ep.model, task, dict(sampling))
            reward = _finite(total(comps), comps)
            accepted = ep.end(reward).accepted
        return [{"task_id": task_id, "components": {k: float(v) for k, v in comps.items()}, "accepted": accepted}]
    with EpisodeGroup({r: client for r in roles}, {r: f"{task_id}:{r}" for r in roles}) as group:
        llms = {r: group[r].openai(max_retries=0) for r in roles}
        out = run(llms, group[roles[0]].model, task, dict(sampling))
        if not isinstance(out, dict) or set(out) != set(roles):
            raise TypeError(f"run() of a client with ROLES must return {{role: {{component: value}}}} for roles {list(roles)}")
        rewards = {r: _finite(total(out[r]), out[r]) for r in roles}
        outcomes = group.commit(rewards)
    return [{"task_id": f"{task_id}:{r}", "components": {k: float(v) for k, v in out[r].items()},
             "accepted": outcomes[r].accepted} for r in roles]
