"""`EpisodeGroup`: episodes on several servers (one per trainable model) that commit on all or on none.

    with EpisodeGroup({"solver": solver_client, "checker": checker_client}, task_id="q17") as g:
        run_workflow(g["solver"].openai(), g["checker"].openai())
        g.commit({"solver": 1.0, "checker": 0.0})

`commit` is a two-phase commit with this client as coordinator:
1. prepare: every member episode is closed and stored durably on its server, outside the pool;
2. if any prepare fails, the group is aborted on every server (nothing enters any pool) and the error is
   raised; otherwise the decision is commit, and the group is committed on every server. A server that
   is down or restarting is retried until `commit_timeout_s`: it replays its journal on restart and
   still holds the prepared group, so the commit completes there too. If a server stays unreachable,
   `GroupInDoubt` names it; calling `finish()` again later completes the group.

Roles served by the same server share one commit call. Eval groups skip the protocol (eval episodes are
never trained), and leaving the `with` block without commit aborts every member.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx

from engine.client.client import Episode, EpisodeOutcome, SwarmClient, SwarmHTTPError, until_available
from engine.errors import GroupInDoubt, SwarmError

__all__ = ["EpisodeGroup"]

class EpisodeGroup:
    """One workflow's episodes across servers; `commit` lands them in every pool or in none."""

    def __init__(
        self,
        clients: dict[str, SwarmClient],
        task_id: str | dict[str, str],
        is_eval: bool = False,
        commit_timeout_s: float = 120.0,
        index: int | None = None,
    ) -> None:
        """`task_id` is one id for every member, or one per member name: roles served by the same server
        (one shared model) need their own ids there so each role forms its own GRPO groups. `index` numbers
        every member among its task's episodes (see `SwarmClient.begin_episode`)."""
        self.group_id = "grp-" + secrets.token_hex(16)
        self.is_eval = is_eval
        self.commit_timeout_s = commit_timeout_s
        self.clients = dict(clients)
        self.episodes: dict[str, Episode] = {}
        self._prepared = False
        self.outcomes: dict[str, EpisodeOutcome] = {}
        try:
            for name, client in clients.items():
                tid = task_id if isinstance(task_id, str) else task_id[name]
                self.episodes[name] = client.begin_episode(tid, is_eval, index=index)
        except Exception:
            self.abort()
            raise

    def __getitem__(self, name: str) -> Episode:
        return self.episodes[name]

    def commit(self, rewards: dict[str, float] | float) -> dict[str, EpisodeOutcome]:
        """Both phases: `prepare(rewards)`, then `finish()`. Returns each role's outcome."""
        if self.is_eval:
            return {name: ep.end(_reward(rewards, name)) for name, ep in self.episodes.items()}
        self.prepare(rewards)
        return self.finish()

    def prepare(self, rewards: dict[str, float] | float) -> None:
        """Phase one. On any failure the group is aborted on every server and the error re-raised."""
        missing = [n for n in self.episodes if not isinstance(rewards, (int, float)) and n not in rewards]
        if missing:
            raise SwarmError(f"no reward for role(s) {missing}; commit needs one per role or one for all")
        try:
            for name, ep in self.episodes.items():
                ep.prepare(self.group_id, _reward(rewards, name))
        except Exception:
            self.abort()
            raise
        self._prepared = True

    def finish(self) -> dict[str, EpisodeOutcome]:
        """Phase two: commit the prepared group on every server, retrying unavailable ones."""
        if not self._prepared:
            raise SwarmError("finish() needs a prepared group: call prepare(rewards) first")
        by_episode: dict[str, dict[str, Any]] = {}
        servers = list(self._servers().items())
        deadline = time.monotonic() + self.commit_timeout_s
        for k, (url, client) in enumerate(servers):
            try:
                answer = until_available(lambda c=client: c.commit_group(self.group_id), deadline)
            except (httpx.TransportError, SwarmHTTPError) as e:
                pending = [u for u, _ in servers[k:]]
                raise GroupInDoubt(self.group_id, pending, f"{url}: {type(e).__name__}: {e}") from e
            by_episode.update({m["episode_id"]: m for m in answer["members"]})
        for name, ep in self.episodes.items():
            m = by_episode.get(ep.episode_id, {"accepted": False, "reason": "not reported by its server"})
            self.outcomes[name] = EpisodeOutcome(ep.episode_id, bool(m["accepted"]), m.get("reason", ""))
        return dict(self.outcomes)

    def abort(self) -> None:
        """Abort every member: live episodes by key, and the group on every server (presumed abort)."""
        if self._prepared:
            return  # the decision is commit: aborting now could split the group across servers
        for ep in self.episodes.values():
            if ep.outcome is None:
                try:
                    ep.abort()
                except (SwarmHTTPError, httpx.TransportError):
                    pass  # that server is gone; its live episode expires there on its own
        for client in self._servers().values():
            try:
                client.abort_group(self.group_id)
            except (SwarmHTTPError, httpx.TransportError):
                pass  # unreachable: it never prepared, or holds the group in doubt until aborted again

    def _servers(self) -> dict[str, SwarmClient]:
        return {c.url: c for c in self.clients.values()}

    def __enter__(self) -> EpisodeGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._prepared:
            self.abort()


def _reward(rewards: dict[str, float] | float, name: str) -> float:
    return float(rewards if isinstance(rewards, (int, float)) else rewards[name])
