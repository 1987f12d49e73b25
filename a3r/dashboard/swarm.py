"""Reading the swarm servers' status API for the dashboard, server-side.

Only servers named in the configuration can be read (by their index), so the dashboard cannot be used to
reach arbitrary addresses, and their admin tokens stay in this process: browsers only see the answers.
The server's pool can be large; `episodes` returns the newest ones only.
"""

from __future__ import annotations

from typing import Any

import httpx

from a3r.dashboard.config import SwarmTarget
from a3r.exceptions import A3RError, NotFound

__all__ = ["SwarmProxy", "UpstreamError"]

TIMEOUT_S = 5.0


class UpstreamError(A3RError, ConnectionError):
    """A configured swarm server could not be reached or refused the request."""


class SwarmProxy:
    def __init__(self, targets: tuple[SwarmTarget, ...]):
        self.targets = targets

    def listing(self) -> list[dict[str, Any]]:
        """The configured servers, without their tokens."""
        return [{"index": i, "url": t.url} for i, t in enumerate(self.targets)]

    def target(self, index: int) -> SwarmTarget:
        if not 0 <= index < len(self.targets):
            raise NotFound(
                f"no swarm server {index}; this dashboard reads {len(self.targets)} "
                "(add them with --swarm URL, or run `swarm dashboard --url URL`)"
            )
        return self.targets[index]

    async def _get(self, index: int, path: str, params: dict[str, str] | None = None) -> Any:
        target = self.target(index)
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
                resp = await client.get(target.url + path, headers=headers, params=params)
        except httpx.HTTPError as e:
            raise UpstreamError(f"cannot reach swarm server {target.url}: {e or type(e).__name__}") from e
        if resp.status_code in (401, 403):
            raise UpstreamError(
                f"swarm server {target.url} refused the admin token; pass the one in its run dir's "
                "admin_token file (--token, or $SWARM_ADMIN_TOKEN)"
            )
        if resp.status_code != 200:
            raise UpstreamError(f"swarm server {target.url}{path} answered HTTP {resp.status_code}")
        return resp.json()

    async def status(self, index: int) -> dict[str, Any]:
        """The server's `/swarm/status` (state, pool fill, clients, last step's metrics, config)."""
        return await self._get(index, "/swarm/status")

    async def episodes(self, index: int, limit: int) -> dict[str, Any]:
        """The newest `limit` pooled episodes at token level (`/swarm/pool/episodes`), newest first, with
        the pool's fill per task over every pooled episode (count and distinct rewards)."""
        data = await self._get(index, "/swarm/pool/episodes")
        episodes = sorted(data.get("episodes", []), key=lambda e: e.get("seq", 0))
        by_task: dict[str, dict[str, Any]] = {}
        for e in episodes:
            t = by_task.setdefault(e["task_id"], {"episodes": 0, "rewards": set()})
            t["episodes"] += 1
            t["rewards"].add(e["reward"])
        tasks = {
            k: {"episodes": v["episodes"], "distinct_rewards": len(v["rewards"])} for k, v in by_task.items()
        }
        return {"total": len(episodes), "by_task": tasks, "episodes": episodes[-limit:][::-1]}
