"""One task played by a client, as both the check's dry run and `vibe train` play it.

A client without `ROLES` plays one episode per task: `run(llm, model, task, sampling)` gets the
episode's OpenAI client and returns {component: value}. A client with `ROLES = ["a", "b", ...]` (a
multi-agent game whose roles share the server's model) gets {role: OpenAI client} as `llm`, one episode
per role, and returns {role: {component: value}}; the role episodes have task ids `<task id>:<role>` (so
each role forms its own groups) and commit or abort together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.client import EpisodeGroup, SwarmClient
from vibe.reward_probes import total

__all__ = ["play_task", "split_roles"]

Record = dict[str, Any]  # {"task_id": ..., "components": {name: value}, "accepted": bool}


def split_roles(roles: Sequence[str], second: Sequence[str]) -> list[list[str]]:
    """The roles of each server: [roles on server 1] or [roles on 1, roles on 2] when `second` names some.

    Raises ValueError naming the fix for a second-server role the client does not declare, or when no
    role would be left on server 1.
    """
    unknown = [r for r in second if r not in roles]
    if unknown:
        raise ValueError(f"second_server_roles {unknown} are not in client.py's ROLES {list(roles)}; "
                         "declare them in ROLES or remove them from vibe.yaml")
    if not second:
        return [list(roles)]
    first = [r for r in roles if r not in second]
    if not first:
        raise ValueError("second_server_roles takes every role; leave at least one on the first server")
    return [first, [r for r in roles if r in second]]


def play_task(client: SwarmClient, run: Callable, roles: Sequence[str], task_id: str, task: dict[str, Any],
              sampling: dict[str, Any], role_clients: Mapping[str, SwarmClient] | None = None,
              index: int | None = None) -> list[Record]:
    """Play `task` once (one episode, or one per role) and end the episode(s) with the reward(s).

    `role_clients` sends some roles' episodes to another server (adversarial training); the rest go to
    `client`. `index` numbers this play among the plays of `task_id` (0..N-1 for a group): its calls then
    sample from their own seeded streams, the same whatever else shares a batch (engine.server.streams);
    without it they draw from the engine's one generator, in arrival order."""
    if not roles:
        with client.episode(task_id, index=index) as ep:
            comps = run(ep.openai(max_retries=0), ep.model, task, dict(sampling))
            reward = total(comps)  # RewardValueError for NaN, inf, strings
            accepted = ep.end(reward).accepted
        return [{"task_id": task_id, "components": {k: float(v) for k, v in comps.items()}, "accepted": accepted}]
    clients = {r: (role_clients or {}).get(r, client) for r in roles}
    with EpisodeGroup(clients, {r: f"{task_id}:{r}" for r in roles}, index=index) as group:
        llms = {r: group[r].openai(max_retries=0) for r in roles}
        out = run(llms, group[roles[0]].model, task, dict(sampling))
        if not isinstance(out, dict) or set(out) != set(roles):
            raise TypeError(f"run() of a client with ROLES must return {{role: {{component: value}}}} for roles {list(roles)}")
        rewards = {r: total(out[r]) for r in roles}
        outcomes = group.commit(rewards)
    return [{"task_id": f"{task_id}:{r}", "components": {k: float(v) for k, v in out[r].items()},
             "accepted": outcomes[r].accepted} for r in roles]
