"""SwarmServer: the single owner of a server's state, driven from one asyncio event loop.

Handlers never hold state across an `await` without re-checking it, so no locks are needed: the event
loop serialises every mutation. Blocking work (model loading, training steps) runs in threads and only
hands results back to the loop.

Training cycle: an episode ends -> the pool policy fires -> ROLLING_POST (new train episodes are refused
with a retry hint, in-flight ones may finish) -> WEIGHT_SYNCING (inference held, optimizer steps) ->
checkpoint -> ROLLING with the new weights live.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.backends.base import Backend, SamplingParams, TokenCallback
from engine.config import SwarmConfig
from engine.errors import BadRequest, EpisodeNotFound, EpisodeRejected, SwarmError
from engine.pool.groups import GroupState, MemberOutcome
from engine.pool.pool import SamplePool
from engine.server.episodes import EndOutcome, EpisodeEnd, EpisodeRegistry, LiveEpisode
from engine.server.limits import max_token_chars, prompt_tokens_lower_bound
from engine.server.state import ServerState, StateMachine
from engine.server.streams import call_seed
from engine.tracking.chat import TOOL_CALL_OPEN, parse_tool_calls, render_prompt
from engine.tracking.history import HistoryReuse, reuse_sampled_ids, sampled_replies
from engine.training.exchange import (
    TRUNCATED_KEY,
    SharedSample,
    cross_episode_id,
    export_sample,
    import_sample,
)
from engine.types import EpisodeResult

log = logging.getLogger("swarm.server")

BackendFactory = Callable[[SwarmConfig], Backend]

@dataclass
class StreamEvent:
    kind: str  # "delta" | "done"
    index: int = 0
    text: str = ""
    completions: list = field(default_factory=list)
    parsed: list = field(default_factory=list)
    n_prompt: int = 0
    sent: dict[int, str] = field(default_factory=dict)  # text already streamed per choice


def _before_possible_stop(text: str, stops: tuple[str, ...]) -> str:
    """Cut at a complete stop string, and hold back a tail that could still grow into one."""
    for s in stops:
        if s in text:
            text = text[: text.index(s)]
    hold = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
    return text[: len(text) - hold]


def streamable(text: str, stops: tuple[str, ...], tools: bool) -> str:
    """The part of a reply so far that may be streamed as content now.

    Always: before a stop string, and not a tail that may grow into one. With tools, also before the
    first `<tool_call>` (or a tail that may begin one; a tool call goes out whole in the final chunk) and
    without trailing whitespace, which `parse_tool_calls` strips from content next to a call: the
    streamed content is then always a prefix of the final message's content.
    """
    safe = _before_possible_stop(text, stops)
    if tools:
        safe = _before_possible_stop(safe, (TOOL_CALL_OPEN,)).rstrip()
    return safe


def training_order(e: EpisodeResult) -> tuple[str, int, int]:
    """Sort key of a batch: by task, then the client's episode index (arrival for episodes without one)."""
    return e.task_id, -1 if e.index is None else e.index, e.seq


# A client not heard from for this long no longer counts as active for the agree policies.
CLIENT_ACTIVE_S = 30.0
# How long an end or prepare waits for the episode's calls in flight. A client that hung up on a call and
# ends at once is right to: the server sees a dropped stream only at its next send and then cancels the
# call, recording nothing; refusing the end in that moment would lose the episode to a race the client
# cannot see. A call still running after this long is a client ending mid-call, refused as before.
CALLS_SETTLE_S = 10.0


class SwarmServer:
    def __init__(self, backend_factory: BackendFactory, config: SwarmConfig | None = None) -> None:
        self._factory = backend_factory
        self.config = config or SwarmConfig()
        self.sm = StateMachine()
        self.backend: Backend | None = None
        self.episodes = EpisodeRegistry(self.config.episodes.idle_timeout_s, self.config.episodes.total_timeout_s)
        self.pool = SamplePool()
        self.clients: dict[str, dict[str, Any]] = {}
        self.metrics: list[dict[str, float]] = []
        self.error: str | None = None
        self._train_episode_done = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        # Batches trained since the last checkpoint: the journal marks them trained only once their
        # weights are on disk, so a crash in between replays them instead of losing them.
        self._uncheckpointed: list[EpisodeResult] = []
        self._sweeper: asyncio.Task | None = None
        self.history = HistoryReuse()  # re-sent assistant turns: fed as sampled ids, already equal, or fallback
        self._cross_dropped = 0  # peers' samples that re-tokenised to nothing since the last step
        # Ends and prepares whose journal write is in flight, by key: a retry waits for the first one's answer.
        self._ending: dict[str, asyncio.Future[EndOutcome]] = {}
        # Chat templates and tokenizers run here, never on the event loop; one thread, because a fast
        # tokenizer shared by concurrent encodes can fail with "Already borrowed".
        self._render_pool = ThreadPoolExecutor(1, thread_name_prefix="swarm-render")
        self._token_chars = 1  # the loaded tokenizer's longest token in characters (limits.max_token_chars)

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def state(self) -> ServerState:
        return self.sm.state

    def configure(self, config: SwarmConfig) -> None:
        if self.state is not ServerState.OFFLINE:
            raise EpisodeRejected(f"configure needs an OFFLINE server (now {self.state.value}); stop it first", 0)
        self.config = config

    async def start(self) -> None:
        """OFFLINE -> BOOTING, then ROLLING once the model is loaded (in the background)."""
        self.sm.transition(ServerState.BOOTING)
        self.error = None
        self._spawn(self._boot())

    async def _boot(self) -> None:
        cfg = self.config
        # Every step that can fail is inside the try: a failure must reach OFFLINE with the reason in
        # `error` (shown by /health and /swarm/status), never leave the server BOOTING for good.
        try:
            pool = await asyncio.to_thread(self._prepare_run_dir, cfg)
            backend = await asyncio.to_thread(self._factory, cfg)
            token_chars = await asyncio.to_thread(max_token_chars, backend.tokenizer)
        except (SwarmError, OSError) as e:  # a config it cannot serve, an unwritable run dir: the message says why
            log.error("boot failed: %s", e)
            self._boot_failed(e)
            return
        except Exception as e:  # noqa: BLE001 - any boot failure must land in status, not kill the loop
            log.exception("boot failed")
            self._boot_failed(e)
            return
        if self.state is not ServerState.BOOTING:  # stopped while loading
            backend.close()
            return
        self.backend = backend
        self._token_chars = token_chars
        self.episodes = EpisodeRegistry(cfg.episodes.idle_timeout_s, cfg.episodes.total_timeout_s)
        if stale := pool.drop_stale(backend.global_step):
            log.warning(
                "discarded %d episode(s) from the journal: they were sampled after step %d, and this start "
                "resumes from step %d (%s), whose weights cannot have sampled them",
                stale, pool.trained_step, backend.global_step,
                "checkpoints are off" if cfg.training.checkpoint_every == 0 else "no checkpoint holds that step",
            )
        self.pool = pool
        self._uncheckpointed = []
        self.sm.transition(ServerState.ROLLING)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = self._spawn(self._sweep_forever())
        self._maybe_trigger()

    def _boot_failed(self, e: Exception) -> None:
        self.error = f"boot failed: {e}"
        if self.state is ServerState.BOOTING:  # not stopped meanwhile
            self.sm.transition(ServerState.OFFLINE)

    @staticmethod
    def _prepare_run_dir(cfg: SwarmConfig) -> SamplePool:
        """Save the config into the run dir and rebuild the pool from its journal (blocking file work).

        Runs before the model loads, so an unwritable run dir or a corrupt journal fails the boot at once.
        """
        if not cfg.run_dir:
            return SamplePool()
        run_dir = Path(cfg.run_dir)
        # The run dir remembers its config, so `swarm serve --run-dir X` after a crash needs no client.
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "swarm_config.yaml").write_text(cfg.to_yaml())
        # background: the journal's fsyncs run on its writer thread, never on the event loop.
        return SamplePool(run_dir / "pool.journal.jsonl", background=True)

    async def stop(self) -> None:
        """Abort live episodes and unload; accepted episodes stay in the journal for the next start."""
        if self.state is ServerState.OFFLINE:
            return
        for ep in self.episodes.live():
            self.episodes.finish(ep, EpisodeEnd.ABORTED)
        self.sm.transition(ServerState.OFFLINE)
        if self.backend is not None:
            self.backend.inference.resume()
            self.backend.close()
            self.backend = None
        await asyncio.to_thread(self.pool.close)  # the journal's last writes land before a restart reads it

    async def shutdown(self) -> None:
        await self.stop()
        for t in list(self._tasks):
            t.cancel()
        self._render_pool.shutdown(wait=False, cancel_futures=True)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- episodes ---------------------------------------------------------------------------------
    def begin_episode(
        self, task_id: str, client_id: str, is_eval: bool, metadata: dict[str, Any], index: int | None = None
    ) -> LiveEpisode:
        self.heartbeat(client_id)
        state = self.state
        if is_eval:
            if state in (ServerState.OFFLINE, ServerState.BOOTING):
                raise EpisodeRejected(f"server is {state.value}; start it and wait for ROLLING", 2.0)
        elif state is not ServerState.ROLLING:
            raise EpisodeRejected(f"server is {state.value}; new training episodes wait for ROLLING", 1.0)
        elif not is_eval and self._throttled(client_id):
            raise EpisodeRejected(f"client {client_id!r} reached its share of the batch (pool.client_share)", 1.0)
        return self.episodes.begin(task_id, client_id, is_eval, metadata, index)

    def _throttled(self, client_id: str) -> bool:
        share = self.config.pool.client_share.get(client_id)
        if share is None:
            return False
        cap = share * self.config.pool.batch_size * self.config.pool.group_size
        in_flight = sum(1 for e in self.episodes.live() if e.client_id == client_id and not e.is_eval)
        return self.pool.episodes_by_client().get(client_id, 0) + in_flight >= cap

    async def end_episode(self, api_key: str, reward: float, metadata: dict[str, Any]) -> EndOutcome:
        """Close an episode by its key; train episodes with at least one call enter the pool.

        Answers only once an accepted episode is durable in the journal (written off the event loop).
        A repeated end with the same key (a client whose answer was lost) gets the first end's answer,
        waiting for it if that end is still being written; the episode never enters the pool twice.
        """
        await self._calls_settled(api_key)
        ending = self._ending.get(api_key)
        if ending is not None:
            return await asyncio.shield(ending)
        done = self.episodes.outcome(api_key)
        if done is not None:
            return done
        ep = self.episodes.get(api_key)
        if ep.calls_in_flight:
            raise BadRequest("episode has calls in flight; end it after its last response arrives")
        # A task, shielded: a client that hangs up mid-write must not cancel the end half-way.
        ending = asyncio.ensure_future(self._end(ep, reward, metadata))
        self._ending[api_key] = ending
        ending.add_done_callback(lambda _: self._ending.pop(api_key, None))
        return await asyncio.shield(ending)

    async def _end(self, ep: LiveEpisode, reward: float, metadata: dict[str, Any]) -> EndOutcome:
        self.episodes.finish(ep, EpisodeEnd.ENDED)
        self.heartbeat(ep.client_id)
        try:
            accepted, reason = await self._pool_episode(ep, reward, metadata)
        finally:  # even on an unexpected error: a drain waiting for this episode must re-check
            if not ep.is_eval:
                self._train_episode_done.set()
        return self.episodes.record_outcome(ep, accepted, reason)

    async def _pool_episode(self, ep: LiveEpisode, reward: float, metadata: dict[str, Any]) -> tuple[bool, str]:
        if ep.is_eval:
            return False, "eval episode: never trained on"
        if not ep.tracker.timelines:
            return False, "episode made no LLM call: nothing to train on"
        if ep.index is not None and self.pool.holds(ep.task_id, ep.index):
            # A client that reran an episode the pool already holds (a resumed job that did not ask):
            # training both would weigh that sample twice. Logged too: the client's work was wasted, and the
            # log is where a run dir shows that its client did not skip what the server held.
            reason = (
                f"episode {ep.index} of task {ep.task_id!r} is already in the pool; an index names one episode "
                "of its task, so a rerun is not trained again"
            )
            log.warning("client %s: %s", ep.client_id, reason)
            return False, reason
        result = self._result(ep, reward, metadata)
        written = self.pool.add(result)
        try:
            await asyncio.wrap_future(written)
        except OSError as e:
            # Disk full, run dir gone: the episode is not durable, so it is not accepted. A batch can only
            # have taken it meanwhile if this write failed after a later one succeeded, which one writer
            # thread writing in order rules out; withdraw() says so if it ever happens.
            log.error("pool journal write failed for episode %s: %s", ep.episode_id, e)
            self.error = f"pool journal write failed: {e}"
            if not self.pool.withdraw(result):
                log.error("episode %s was taken for training before its journal write failed", ep.episode_id)
            return False, f"not accepted: the server could not journal the episode ({e}); see its log"
        # Only a durable episode may fire the trigger (writes are in order, so then every pooled one is).
        self._maybe_trigger()
        return True, ""

    async def _calls_settled(self, api_key: str) -> None:
        """Wait up to CALLS_SETTLE_S for a live episode's calls in flight to finish (or be cancelled).

        Returns at once for an episode already finished or being ended (the caller answers those); the
        caller checks again after this, with no await in between, and refuses if calls still run."""
        deadline = time.monotonic() + CALLS_SETTLE_S
        while time.monotonic() < deadline and api_key not in self._ending:
            try:
                ep = self.episodes.get(api_key)
            except SwarmError:  # unknown or finished: the caller's own checks answer it
                return
            if not ep.calls_in_flight:
                return
            await asyncio.sleep(0.02)

    async def _durable(self, written: Future[None], what: str) -> None:
        """Wait until a journal write is on disk before answering; a failed write is a 503 (the client may
        retry: repeats are idempotent) and the server's error. Shielded: a client that hangs up must not
        cancel the write, whose change the pool's memory already holds."""
        try:
            await asyncio.shield(asyncio.wrap_future(written))
        except OSError as e:
            raise self._journal_failed(e, what) from e

    def _journal_failed(self, e: OSError, what: str) -> EpisodeRejected:
        log.error("pool journal write failed for %s: %s", what, e)
        self.error = f"pool journal write failed: {e}"
        return EpisodeRejected(f"the server could not journal {what} ({e}); see its log", 1.0)

    # -- episode groups (two-phase commit, see engine.pool.groups) -------------------------------------
    async def prepare_episode(self, api_key: str, group_id: str, reward: float, metadata: dict[str, Any]) -> EndOutcome:
        """Phase one: close a training episode and hold it durably for `group_id`, outside the pool.

        Answers once the prepare record is durable. A repeated prepare with the same key and group (a
        client whose answer was lost) gets the first one's answer, waiting for it while it is written.
        """
        await self._calls_settled(api_key)
        ending = self._ending.get(api_key)
        done = await asyncio.shield(ending) if ending is not None else self.episodes.outcome(api_key)
        if done is not None:
            if done.group_id != group_id:
                raise EpisodeNotFound(f"episode {done.episode_id} already finished ({done.reason or 'ended'})")
            return done
        ep = self.episodes.get(api_key)
        if ep.calls_in_flight:
            raise BadRequest("episode has calls in flight; prepare it after its last response arrives")
        if ep.is_eval:
            raise BadRequest("eval episodes are never trained, so they take no part in a commit; end them instead")
        self._require_pool()
        self.pool.group_table.check_prepare(group_id)
        # A task, shielded: a client that hangs up mid-write must not cancel the prepare half-way.
        ending = asyncio.ensure_future(self._prepare(ep, group_id, reward, metadata))
        self._ending[api_key] = ending
        ending.add_done_callback(lambda _: self._ending.pop(api_key, None))
        return await asyncio.shield(ending)

    async def _prepare(self, ep: LiveEpisode, group_id: str, reward: float, metadata: dict[str, Any]) -> EndOutcome:
        self.episodes.finish(ep, EpisodeEnd.ENDED)
        self.heartbeat(ep.client_id)
        result = self._result(ep, reward, metadata)
        try:
            await self._durable(self.pool.prepare(group_id, result), f"episode {ep.episode_id}'s prepare")
        except EpisodeRejected as e:
            # Not durable, so not prepared: the client's group aborts; a retry is told the episode ended.
            if not self.pool.unprepare(group_id, result):
                log.error("group %s was decided before episode %s's prepare failed", group_id, ep.episode_id)
            self.episodes.record_outcome(ep, False, f"not prepared: {e}")
            raise
        finally:  # a drain waiting for this episode must re-check
            self._train_episode_done.set()
        return self.episodes.record_outcome(ep, False, f"prepared in group {group_id}", group_id)

    async def commit_group(self, group_id: str) -> list[MemberOutcome]:
        """Phase two: the group's prepared episodes enter the pool (a repeat gets the same answer).

        Answers once the commit record is durable (a repeat waits for the first commit's write)."""
        self._require_pool()
        outcomes = self.pool.commit_group(group_id)
        await self._durable(self.pool.decision_write(group_id), f"the commit of group {group_id}")
        self._maybe_trigger()
        return outcomes

    async def abort_group(self, group_id: str) -> None:
        """Drop a group here (idempotent); answers once the abort record is durable."""
        self._require_pool()
        self.pool.abort_group(group_id)
        await self._durable(self.pool.decision_write(group_id), f"the abort of group {group_id}")

    def group_state(self, group_id: str) -> GroupState:
        self._require_pool()
        return self.pool.group_table.state(group_id)

    def _require_pool(self) -> None:
        # Before boot the pool is not read back from the journal yet: a group's state is not known.
        if self.state in (ServerState.OFFLINE, ServerState.BOOTING):
            raise EpisodeRejected(f"server is {self.state.value}; episode groups resolve once it is started", 2.0)

    @staticmethod
    def _result(ep: LiveEpisode, reward: float, metadata: dict[str, Any]) -> EpisodeResult:
        return EpisodeResult(
            episode_id=ep.episode_id,
            task_id=ep.task_id,
            client_id=ep.client_id,
            reward=reward,
            timelines=ep.tracker.timelines,
            metadata={**ep.metadata, **metadata},
            prompt_messages=ep.prompt_messages,
            index=ep.index,
        )

    # -- collaboration groups: tokenizer-neutral sample exchange (engine.training.exchange) ------------
    def export_samples(self) -> list[SharedSample]:
        """This agent's own pooled episodes in shared form (the current step's, under the agree policies)."""
        collab, backend = self._require_collaboration()
        stops = set(backend.inference.stop_token_ids)
        out = (export_sample(e, collab.agent, backend.tokenizer, stops) for g in self.pool.groups.values() for e in g)
        return [s for s in out if s is not None]

    async def import_samples(self, samples: list[SharedSample]) -> dict[str, int]:
        """Add peers' samples to the pool as cross episodes, durably; a repeated sample is skipped.

        Answers once every sample it names is durable: its own imports, and a repeat's duplicates (an
        earlier import of them may still be being written). A failed write withdraws that sample and is
        a 503, so the exchange retries and imports what is missing.
        """
        collab, backend = self._require_collaboration()
        if self.state is not ServerState.ROLLING:
            raise EpisodeRejected(f"server is {self.state.value}; import a step's samples before it trains", 1.0)
        own = [s.episode_id for s in samples if s.source == collab.agent]
        if own:
            raise BadRequest(f"samples {own[:3]} come from this server's own agent {collab.agent!r}; send peers' samples only")
        present = {e.episode_id for g in self.pool.groups.values() for e in g}
        counts = {"imported": 0, "duplicates": 0, "dropped_empty": 0, "truncated": 0}
        limit = self.config.episodes.max_context_tokens
        added: list[tuple[EpisodeResult, Future[None]]] = []
        for s in samples:
            if cross_episode_id(s) in present:
                counts["duplicates"] += 1
                continue
            ep = import_sample(s, backend.tokenizer, backend.inference.stop_token_ids, limit)
            if ep is None:
                counts["dropped_empty"] += 1
                continue
            counts["truncated"] += int(ep.metadata[TRUNCATED_KEY])
            added.append((ep, self.pool.add(ep)))
            present.add(ep.episode_id)
            counts["imported"] += 1
        self._cross_dropped += counts["dropped_empty"]
        # A task, shielded: a client that hangs up must not skip withdrawing a sample whose write failed.
        await asyncio.shield(asyncio.ensure_future(self._imports_durable(added)))
        if counts["duplicates"]:
            await self._durable(self.pool.last_write(), "earlier imports")
        return counts

    async def _imports_durable(self, added: list[tuple[EpisodeResult, Future[None]]]) -> None:
        written = await asyncio.gather(*(asyncio.wrap_future(w) for _, w in added), return_exceptions=True)
        failed = [(ep, e) for (ep, _), e in zip(added, written, strict=True) if isinstance(e, BaseException)]
        for ep, _ in failed:
            self.pool.withdraw(ep)
        if failed:
            error = failed[0][1]
            if not isinstance(error, OSError):
                raise error
            raise self._journal_failed(error, f"{len(failed)} of {len(added)} imported samples") from error

    def _require_collaboration(self):
        collab = self.config.collaboration
        if collab is None:
            raise BadRequest("this server is not part of a collaboration group; set `collaboration` in its config")
        return collab, self._require_backend()

    def abort_episode(self, ep: LiveEpisode, how: EpisodeEnd = EpisodeEnd.ABORTED) -> None:
        self.episodes.finish(ep, how)
        if not ep.is_eval:
            self._train_episode_done.set()

    async def _sweep_forever(self) -> None:
        interval = max(0.05, min(1.0, self.config.episodes.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(interval)
            for ep in self.episodes.expired():
                log.info("episode %s expired", ep.episode_id)
                self.abort_episode(ep, EpisodeEnd.EXPIRED)

    # -- clients ----------------------------------------------------------------------------------
    def heartbeat(self, client_id: str) -> None:
        c = self.clients.setdefault(client_id, {"agree": False})
        c["last_seen"] = time.time()

    def agree(self, client_id: str) -> None:
        self.heartbeat(client_id)
        self.clients[client_id]["agree"] = True
        self._maybe_trigger()

    def _active_clients(self) -> frozenset[str]:
        now = time.time()
        return frozenset(c for c, v in self.clients.items() if now - v["last_seen"] < CLIENT_ACTIVE_S)

    # -- inference --------------------------------------------------------------------------------
    async def chat(
        self,
        ep: LiveEpisode,
        messages: list[dict],
        tools: list[dict] | None,
        params: SamplingParams,
    ):
        """Render, generate and record one call; returns (completions, parsed choices, prompt length).

        Cancelling the caller (its client went away) stops the generation at the engine's next step and
        records nothing: an episode is trained only on replies that were delivered.
        """
        with self._call_in_flight(ep):
            rendered, completions = await self._generate(ep, messages, tools, params)
            self._record(ep, messages, rendered, completions)
        return completions, self._parse(completions, tools), len(rendered.token_ids)

    async def chat_stream(self, ep: LiveEpisode, messages: list[dict], tools: list[dict] | None, params: SamplingParams):
        """Like `chat`, but yields text deltas while tokens are sampled, then one final `done` event.

        The call is recorded only when the consumer asks for more after `done`, i.e. once the final
        chunks went out: a stream closed earlier (client disconnect) stops its generation and records
        nothing, so no token the client never received is trained. Close this generator (aclosing) so
        that happens at once rather than when it is garbage-collected.
        """
        backend = self._require_backend()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

        def on_token(index: int, token_id: int) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (index, token_id))

        with self._call_in_flight(ep):
            task = asyncio.ensure_future(self._generate(ep, messages, tools, params, on_token=on_token))
            try:
                ids: dict[int, list[int]] = {}
                sent: dict[int, str] = {}
                stops = set(backend.inference.stop_token_ids)
                while not (task.done() and queue.empty()):
                    getter = asyncio.ensure_future(queue.get())
                    try:
                        await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        if not getter.done():
                            getter.cancel()
                    if not getter.done() or getter.cancelled():
                        continue
                    index, token_id = getter.result()
                    if token_id in stops:
                        continue
                    ids.setdefault(index, []).append(token_id)
                    text = backend.tokenizer.decode(ids[index], skip_special_tokens=True)
                    # Hold back a trailing replacement char: it is half of a multi-byte character.
                    if text.endswith("\ufffd"):
                        continue
                    safe = streamable(text, params.stop, bool(tools))
                    prev = sent.get(index, "")
                    if len(safe) > len(prev) and safe.startswith(prev):
                        sent[index] = safe
                        yield StreamEvent("delta", index, safe[len(prev) :])
                rendered, completions = task.result()
                parsed = self._parse(completions, tools)
                yield StreamEvent("done", completions=completions, parsed=parsed, n_prompt=len(rendered.token_ids), sent=sent)
                self._record(ep, messages, rendered, completions)
            finally:
                if not task.done():
                    task.cancel()  # the engine drops the call's rows at its next step

    def _episode_stream(self, ep: LiveEpisode, params: SamplingParams) -> SamplingParams:
        """The call's sampling seed from the episode's own stream (engine.server.streams), counting the call.

        A request's own seed wins; an episode without an index keeps the engine's generator."""
        call = ep.calls_started
        ep.calls_started += 1
        if params.seed is not None or ep.index is None:
            return params
        return replace(params, seed=call_seed(self.config.model.seed, ep.task_id, ep.index, call))

    @contextmanager
    def _call_in_flight(self, ep: LiveEpisode):
        """Count a call as in flight (an end waits for it; the idle deadline is held off) while it runs."""
        ep.calls_in_flight += 1
        self.episodes.touch(ep)
        try:
            yield
        finally:
            ep.calls_in_flight -= 1
            self.episodes.touch(ep)

    async def _generate(
        self,
        ep: LiveEpisode,
        messages: list[dict],
        tools: list[dict] | None,
        params: SamplingParams,
        on_token: TokenCallback | None = None,
    ):
        """Check the length, render (off the event loop) and generate one call; returns (rendered, completions).

        An over-long conversation is refused twice: first from its character count alone, before any
        template or tokenizer runs over it (a huge prompt would hold a core and gigabytes for minutes),
        then exactly, from the rendered ids.
        """
        backend = self._require_backend()
        params = self._episode_stream(ep, params)  # before any await: calls are numbered as they begin
        limit = self.config.episodes.max_context_tokens
        at_least = prompt_tokens_lower_bound(messages, self._token_chars)
        if at_least + params.max_new_tokens > limit:
            raise BadRequest(
                f"prompt (at least {at_least} tokens by its length) + max_tokens ({params.max_new_tokens}) exceeds "
                f"episodes.max_context_tokens={limit}; shorten the conversation or lower max_tokens"
            )
        sampled = sampled_replies(ep.tracker.timelines) if self.config.episodes.exact_history else None
        render = functools.partial(self._render, backend, messages, tools, sampled)
        rendered, reuse = await asyncio.get_running_loop().run_in_executor(self._render_pool, render)
        if reuse is not None:
            self.history += reuse
        if len(rendered.token_ids) + params.max_new_tokens > limit:
            raise BadRequest(
                f"prompt ({len(rendered.token_ids)} tokens) + max_tokens ({params.max_new_tokens}) exceeds "
                f"episodes.max_context_tokens={limit}; shorten the conversation or lower max_tokens"
            )
        completions = await backend.inference.generate(rendered.token_ids, params, on_token=on_token)
        return rendered, completions

    @staticmethod
    def _render(backend: Backend, messages: list[dict], tools: list[dict] | None, sampled):
        """The chat template and tokenizer over one request (blocking: runs on the render thread)."""
        rendered = render_prompt(backend.tokenizer, messages, tools, end_of_turn_ids=backend.inference.stop_token_ids)
        if sampled is None:
            return rendered, None
        return reuse_sampled_ids(rendered, sampled)

    def _record(self, ep: LiveEpisode, messages: list[dict], rendered, completions) -> None:
        ep.tracker.record_call(rendered, completions)
        if self.config.collaboration is not None:  # peers re-render this request with their own template
            ep.prompt_messages = messages

    @staticmethod
    def _parse(completions, tools: list[dict] | None) -> list:
        return [parse_tool_calls(c.text) if tools else (c.text, []) for c in completions]

    def _require_backend(self) -> Backend:
        if self.backend is None or self.state in (ServerState.OFFLINE, ServerState.BOOTING):
            raise EpisodeRejected(f"server is {self.state.value}: no model is loaded", 2.0)
        return self.backend

    # -- training ---------------------------------------------------------------------------------
    def _maybe_trigger(self) -> None:
        if self.state is not ServerState.ROLLING:
            return
        if self.config.training.max_steps is not None and self.backend is not None:
            if self.backend.global_step >= self.config.training.max_steps:
                return
        pc = self.config.pool
        active = self._active_clients()
        agreeing = frozenset(c for c in active if self.clients[c]["agree"])
        sel = self.pool.select(
            pc.policy, pc.batch_size, pc.group_size, active_clients=active, agreeing_clients=agreeing
        )
        if sel is None:
            return
        self.sm.transition(ServerState.ROLLING_POST)
        self._spawn(self._drain_and_train(sel.batch))

    async def _drain_and_train(self, batch: list[EpisodeResult]) -> None:
        while self.episodes.in_flight(is_eval=False) > 0 and self.state is ServerState.ROLLING_POST:
            self._train_episode_done.clear()
            await self._train_episode_done.wait()
        if self.state is not ServerState.ROLLING_POST or self.backend is None:
            return
        self.sm.transition(ServerState.WEIGHT_SYNCING)
        backend = self.backend
        self.pool.take(batch)
        # The same episodes in the same order in every run, whatever order they arrived in: the order
        # decides the trainer's mini-batches and float sums, so metrics are then reproducible bit for bit.
        batch = sorted(batch, key=training_order)
        await backend.inference.pause()
        try:
            t0 = time.perf_counter()
            metrics = await asyncio.to_thread(backend.train_step, batch)
            t_trained = time.perf_counter()
            self.pool.mark_stepped(backend.global_step, batch)
            self._uncheckpointed.extend(batch)
            # With checkpoints off (checkpoint_every 0) weights are never durable and a restart begins
            # from the initial model, so there is nothing to wait for: a trained batch is consumed now.
            # Otherwise the journal would replay every episode ever accepted, and keep them all.
            wrote = await asyncio.to_thread(backend.checkpoint)
            if wrote or self.config.training.checkpoint_every == 0:
                # written in order, after every add it names
                self.pool.mark_trained(self._uncheckpointed, backend.global_step)
                self._uncheckpointed = []
            t_end = time.perf_counter()
            # The run-cost breakdown (benchmarks/run_cost.py): the update, the checkpoint write, their sum.
            metrics = {
                **metrics,
                "step_time_s": t_end - t0,
                "update_s": t_trained - t0,
                "checkpoint_s": t_end - t_trained,
                "checkpoint_written": float(wrote),
            }
            if self.config.collaboration is not None:
                metrics["cross_dropped_empty"] = float(self._cross_dropped)
                self._cross_dropped = 0
            self.metrics.append(metrics)
            self.error = None
        except Exception as e:  # noqa: BLE001 - a failed step must not lose the batch or kill serving
            log.exception("training step failed")
            self.error = f"training step failed: {e}"
            self.pool.restore(batch)
        finally:
            backend.inference.resume()
        if self.state is ServerState.WEIGHT_SYNCING:
            for c in self.clients.values():
                c["agree"] = False
            self.sm.transition(ServerState.ROLLING)
            if self.error is None:
                self._maybe_trigger()

    # -- reporting --------------------------------------------------------------------------------
    def pool_info(self) -> dict[str, Any]:
        pc = self.config.pool
        groups = self.pool.groups
        complete = [t for t, g in groups.items() if len(g) >= pc.group_size]
        return {
            "policy": pc.policy,
            "episodes": len(self.pool),
            "tasks": len(groups),
            "complete_tasks": len(complete),
            "nondegenerate_tasks": sum(1 for t in complete if len({e.reward for e in groups[t][: pc.group_size]}) > 1),
            "target_tasks": pc.batch_size,
            "group_size": pc.group_size,
            "discarded_degenerate": self.pool.discarded,
            "discarded_stale": self.pool.stale_dropped,
            "by_client": self.pool.episodes_by_client(),
            "held": self.pool.held_indices(),
        }

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "model": self.config.model.name if self.backend is not None else None,
            "global_step": self.backend.global_step if self.backend is not None else 0,
            "episodes_live": self.episodes.in_flight(is_eval=False),
            "episodes_live_eval": self.episodes.in_flight(is_eval=True),
            "episode_counts": dict(self.episodes.counts),
            "pool": self.pool_info(),
            "clients": {c: {"agree": v["agree"], "last_seen": v["last_seen"]} for c, v in self.clients.items()},
            "last_metrics": self.metrics[-1] if self.metrics else None,
            "groups_in_doubt": self.pool.group_table.in_doubt(),
            "history": self.history.as_dict(),
            "error": self.error,
            "config": self.config.model_dump(mode="json"),
        }

