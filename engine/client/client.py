"""`SwarmClient`: control a swarm server and open episodes whose base_url/api_key any agent can use.

    client = SwarmClient("http://127.0.0.1:10086", admin_token=token)
    client.configure(SwarmConfig(...)); client.start(wait=True)
    with client.episode(task_id="q17") as ep:
        reply = ep.openai().chat.completions.create(model=ep.model, messages=[...])
        ep.end(reward=score(reply))

Leaving the `with` block without `end()` (or through an exception) aborts the episode, so a crashed
agent never leaves a half-recorded episode behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from engine.config import SwarmConfig
from engine.errors import SwarmError

T = TypeVar("T")


class SwarmHTTPError(SwarmError):
    """The server answered with an error; `status` and the server's `reason` are kept."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None):
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


@dataclass(frozen=True)
class EpisodeOutcome:
    episode_id: str
    accepted: bool
    reason: str


def _raise_for(resp: httpx.Response) -> dict[str, Any]:
    if resp.status_code < 400:
        return resp.json()
    try:
        reason = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        reason = resp.text[:500]
    retry = resp.headers.get("Retry-After")
    raise SwarmHTTPError(resp.status_code, reason, float(retry) if retry else None)


# Answers that may change if asked again: the server is restarting, syncing or briefly unreachable.
RETRYABLE_STATUS = frozenset({502, 503, 504})


def until_available(call: Callable[[], T], deadline: float, poll: float = 0.25) -> T:
    """`call()` until it succeeds, retrying connection errors and 502/503/504 until `deadline`
    (time.monotonic); the last error is raised after it. Only for calls that are safe to repeat."""
    while True:
        try:
            return call()
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        except SwarmHTTPError as e:
            if e.status not in RETRYABLE_STATUS or time.monotonic() > deadline:
                raise
        time.sleep(poll)


class SwarmClient:
    """Synchronous client of one swarm server. Thread-safe: runners share one instance across threads."""

    def __init__(
        self,
        url: str,
        admin_token: str | None = None,
        client_id: str = "default",
        timeout: float = 600.0,
    ) -> None:
        self.url = url.rstrip("/")
        token = admin_token or os.environ.get("SWARM_ADMIN_TOKEN")
        if not token:
            raise SwarmError("no admin token: pass admin_token= or set SWARM_ADMIN_TOKEN (see `swarm serve` output)")
        self.client_id = client_id
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SwarmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- control plane ----------------------------------------------------------------------------
    def configure(self, config: SwarmConfig | dict[str, Any]) -> dict[str, Any]:
        body = config.model_dump(mode="json") if isinstance(config, SwarmConfig) else config
        return _raise_for(self._http.post("/swarm/configure", json=body))

    def start(self, wait: bool = True, timeout: float = 600.0) -> dict[str, Any]:
        """Start the server; with `wait`, block until it is ROLLING (raises if booting failed)."""
        out = _raise_for(self._http.post("/swarm/start"))
        if wait:
            return self.wait_for_state({"ROLLING", "ROLLING_POST", "WEIGHT_SYNCING"}, timeout)
        return out

    def stop(self) -> dict[str, Any]:
        return _raise_for(self._http.post("/swarm/stop"))

    def status(self) -> dict[str, Any]:
        return _raise_for(self._http.get("/swarm/status"))

    def health(self) -> dict[str, Any]:
        """The server's /health: state, torch threads, and how its inference engine batches (`inference`)."""
        return _raise_for(self._http.get("/health"))

    def pool(self) -> dict[str, Any]:
        return _raise_for(self._http.get("/swarm/pool"))

    def heartbeat(self) -> None:
        _raise_for(self._http.post("/swarm/clients/heartbeat", json={"client_id": self.client_id}))

    def agree(self) -> None:
        """Signal that this client is ready for a training step (all/any-client-agree pool policies)."""
        _raise_for(self._http.post("/swarm/clients/agree", json={"client_id": self.client_id}))

    def wait_for_state(self, states: set[str], timeout: float = 600.0, poll: float = 0.2) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            st = self.status()
            if st["state"] in states:
                return st
            if st["state"] == "OFFLINE" and st.get("error"):
                raise SwarmError(st["error"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"server still {st['state']} after {timeout}s (waiting for {sorted(states)})")
            time.sleep(poll)

    def wait_for_step(self, step: int, timeout: float = 600.0, poll: float = 0.2) -> dict[str, Any]:
        """Block until the server's global step reaches `step`."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.status()
            if st["global_step"] >= step and st["state"] == "ROLLING":
                return st
            if time.monotonic() > deadline:
                raise TimeoutError(f"server at step {st['global_step']} after {timeout}s (waiting for {step})")
            time.sleep(poll)

    # -- episodes ---------------------------------------------------------------------------------
    def begin_episode(
        self,
        task_id: str,
        is_eval: bool = False,
        metadata: dict[str, Any] | None = None,
        wait: float = 600.0,
        index: int | None = None,
    ) -> Episode:
        """Claim an episode; waits (honouring Retry-After) while the server is syncing weights.

        `index` numbers this episode among this client's episodes of `task_id` (0..N-1 for a group): the
        server then seeds its sampling from (run seed, task, index, call), the same in every run.
        """
        body = {"task_id": task_id, "client_id": self.client_id, "is_eval": is_eval, "metadata": metadata or {}}
        if index is not None:
            body["index"] = index
        deadline = time.monotonic() + wait
        while True:
            try:
                d = _raise_for(self._http.post("/swarm/episodes", json=body))
                return Episode(self, d["episode_id"], d["base_url"], d["api_key"], d["model"], task_id, is_eval)
            except SwarmHTTPError as e:
                if e.status != 503 or time.monotonic() > deadline:
                    raise
                time.sleep(min(e.retry_after or 1.0, 1.0))

    def episode(
        self, task_id: str, is_eval: bool = False, metadata: dict[str, Any] | None = None, index: int | None = None
    ) -> Episode:
        """Open an episode for use as a context manager (`index`: see `begin_episode`)."""
        return self.begin_episode(task_id, is_eval, metadata, index=index)

    # -- episode groups (two-phase commit; see engine.client.group) --------------------------------
    def commit_group(self, group_id: str) -> dict[str, Any]:
        """Commit a group prepared on this server; a repeat returns the same members."""
        return _raise_for(self._http.post(f"/swarm/groups/{group_id}/commit"))

    def abort_group(self, group_id: str) -> dict[str, Any]:
        return _raise_for(self._http.post(f"/swarm/groups/{group_id}/abort"))

    def group(self, group_id: str) -> dict[str, Any]:
        """`{group_id, state: unknown|prepared|committed|aborted, members}` on this server."""
        return _raise_for(self._http.get(f"/swarm/groups/{group_id}"))

    # -- collaboration groups (engine.training.exchange) -------------------------------------------
    def export_samples(self) -> list[dict[str, Any]]:
        """This agent's own samples of the current step, tokenizer-neutral."""
        return _raise_for(self._http.get("/swarm/exchange"))["samples"]

    def import_samples(self, samples: list[dict[str, Any]]) -> dict[str, int]:
        """Give this learner its peers' samples (a repeated sample is skipped server-side)."""
        return _raise_for(self._http.post("/swarm/exchange", json={"samples": samples}))

    def _episode_call(self, api_key: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return _raise_for(self._http.post(path, json=body or {}, headers={"Authorization": f"Bearer {api_key}"}))


_END_ATTEMPTS = 4  # an end is safe to repeat (see Episode.end); four tries ride out a dropped connection


class Episode:
    """One claimed episode. Its `base_url` and `api_key` are all an agent needs (OpenAI-compatible)."""

    def __init__(self, client: SwarmClient, episode_id: str, base_url: str, api_key: str, model: str, task_id: str, is_eval: bool):
        self._client = client
        self.episode_id = episode_id
        self.base_url = base_url
        self.api_key = api_key
        self.model = model
        self.task_id = task_id
        self.is_eval = is_eval
        self.outcome: EpisodeOutcome | None = None

    def openai(self, **kwargs: Any):
        """An `openai.OpenAI` client bound to this episode."""
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def end(self, reward: float, metadata: dict[str, Any] | None = None) -> EpisodeOutcome:
        """Report the reward and close the episode.

        A connection that fails before the answer arrives is retried with the same key: the server
        answers a repeated end with the first end's outcome, so the episode never enters the pool twice.
        """
        if self.outcome is not None:
            raise SwarmError(f"episode {self.episode_id} already finished")
        d = self._repeatable("/v1/episode/end", {"reward": reward, "metadata": metadata or {}})
        self.outcome = EpisodeOutcome(d["episode_id"], d["accepted"], d.get("reason", ""))
        return self.outcome

    def prepare(self, group_id: str, reward: float, metadata: dict[str, Any] | None = None) -> None:
        """Phase one of a group commit (use `EpisodeGroup`): the server closes the episode and holds it
        durably for `group_id`; it enters the pool only when the group is committed there."""
        if self.outcome is not None:
            raise SwarmError(f"episode {self.episode_id} already finished")
        self._repeatable("/v1/episode/prepare", {"group_id": group_id, "reward": reward, "metadata": metadata or {}})
        self.outcome = EpisodeOutcome(self.episode_id, False, f"prepared in group {group_id}")

    def _repeatable(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        # Safe to repeat: the server answers a repeated end/prepare with the first one's answer.
        for attempt in range(_END_ATTEMPTS):
            try:
                return self._client._episode_call(self.api_key, path, body)
            except httpx.TransportError:
                if attempt == _END_ATTEMPTS - 1:
                    raise
                time.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")

    def abort(self) -> None:
        if self.outcome is not None:
            return
        try:
            self._client._episode_call(self.api_key, "/v1/episode/abort")
        except SwarmHTTPError as e:
            # 404: already finished server-side (expired); 401: a key the server no longer knows (it
            # restarted since). Either way there is nothing left to abort.
            if e.status not in (401, 404):
                raise
        self.outcome = EpisodeOutcome(self.episode_id, False, "aborted")

    def __enter__(self) -> Episode:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.outcome is None:
            self.abort()
