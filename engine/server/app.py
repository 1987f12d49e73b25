"""HTTP surface of a swarm server (FastAPI). Maps domain errors to status codes; holds no state itself.

Auth: the control plane and episode begin need `Authorization: Bearer <admin token>`; inference and
episode end/abort need the episode's own key. Every 4xx carries OpenAI's error shape,
`{"error": {"message", "type", "code"}}`, so OpenAI SDKs raise their matching exception classes.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager

from fastapi import Depends, FastAPI, Header, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from engine.backends.base import SamplingParams
from engine.config import SwarmConfig
from engine.errors import (
    AuthenticationFailed,
    BadRequest,
    ConfigError,
    EpisodeNotFound,
    EpisodeRejected,
    GroupConflict,
    GroupNotFound,
    IllegalTransition,
)
from engine.server.core import SwarmServer
from engine.server.episodes import EpisodeEnd, LiveEpisode
from engine.server.limits import BodyLimit
from engine.server.schemas import (
    GROUP_ID_PATTERN,
    BeginEpisodeRequest,
    BeginEpisodeResponse,
    ChatCompletionRequest,
    ClientSignal,
    EndEpisodeRequest,
    EndEpisodeResponse,
    ExchangeBatch,
    GroupMember,
    GroupResponse,
    PrepareEpisodeRequest,
    PrepareEpisodeResponse,
    StatusResponse,
)


def _error_body(message: str, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "code": code}}


def _error(
    status: int, message: str, kind: str, code: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(_error_body(message, kind, code), status_code=status, headers=headers)


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise AuthenticationFailed("missing 'Authorization: Bearer <key>' header")
    return authorization[7:].strip()



def inference_info(server: SwarmServer) -> dict:
    """How the booted inference engine batches: `max_batch_rows` (the most rows it decodes in one pass,
    what a client sends at once to fill a batch) and its pass counters since boot (`decode_passes`,
    `max_rows`: the biggest batch it formed, `tokens_generated`). Empty before the model is loaded and
    for engines that keep no such bound or counters (vLLM batches whatever it is sent)."""
    engine = getattr(server.backend, "inference", None)
    rows = getattr(engine, "max_batch_rows", None)
    if not isinstance(rows, int):
        return {}
    stats = getattr(engine, "stats", None)
    info = {"max_batch_rows": rows}
    if stats is not None:  # read without the engine's lock: ints, and max() over the histogram runs in C under the GIL
        info.update(decode_passes=stats.decode_passes, max_rows=stats.max_rows, tokens_generated=stats.tokens_generated)
    return info

def create_app(server: SwarmServer, admin_token: str, public_url: str | None = None, autostart: bool = False) -> FastAPI:
    """Build the ASGI app around a SwarmServer. `public_url` is what episode base_urls point at."""
    if not admin_token:
        # An empty token would make "Authorization: Bearer " an admin credential.
        raise ConfigError("the admin token is empty; pass a non-empty token")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if autostart:
            await server.start()
        yield
        await server.shutdown()

    app = FastAPI(title="swarm server", version="0.1.0", lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=lambda: server.config.episodes.max_request_bytes)

    # -- error mapping ----------------------------------------------------------------------------
    @app.exception_handler(AuthenticationFailed)
    async def _auth(_: Request, e: AuthenticationFailed):
        return _error(401, str(e), "authentication_error", "invalid_api_key")

    @app.exception_handler(EpisodeNotFound)
    async def _nf(_: Request, e: EpisodeNotFound):
        # KeyError's str() quotes its argument; the message is args[0].
        return _error(404, e.args[0] if e.args else "episode not found", "episode_not_found", "episode_finished")

    @app.exception_handler(EpisodeRejected)
    async def _rej(_: Request, e: EpisodeRejected):
        retry = {"Retry-After": str(max(1, round(e.retry_after)))}
        return _error(503, str(e), "not_ready", headers=retry)

    @app.exception_handler(IllegalTransition)
    async def _ill(_: Request, e: IllegalTransition):
        return _error(409, str(e), "illegal_transition")

    @app.exception_handler(GroupNotFound)
    async def _gnf(_: Request, e: GroupNotFound):
        return _error(404, e.args[0] if e.args else "group not found", "group_not_found")

    @app.exception_handler(GroupConflict)
    async def _gc(_: Request, e: GroupConflict):
        return _error(409, str(e), "group_conflict")

    @app.exception_handler(BadRequest)
    async def _bad(_: Request, e: BadRequest):
        return _error(400, str(e), "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def _val(_: Request, e: RequestValidationError):
        parts = [f"{'.'.join(str(p) for p in err['loc'] if p != 'body')}: {err['msg']}" for err in e.errors()]
        return _error(422, "; ".join(parts) or "invalid request body", "invalid_request_error")

    # -- auth dependencies ------------------------------------------------------------------------
    # async on purpose: FastAPI runs a plain `def` dependency in its thread pool, and on every request
    # that hand-off (capacity limiter, worker wake-up) cost more than the check itself.
    async def require_admin(authorization: str | None = Header(None)) -> None:
        if not hmac.compare_digest(_bearer(authorization).encode(), admin_token.encode()):
            raise AuthenticationFailed("invalid admin token")

    async def episode_from_key(authorization: str | None = Header(None)) -> LiveEpisode:
        return server.episodes.get(_bearer(authorization))

    # -- health and models ------------------------------------------------------------------------
    @app.get("/health")
    async def health():
        """Liveness, the lifecycle state, the last boot or training error (None when healthy), the torch
        threads this server computes with (what its slot's OMP_NUM_THREADS gave it: A3R's 1-thread slots)
        and how its inference engine batches (`inference_info`)."""
        import torch  # loaded by the backend already; here only to read the thread count

        return {
            "ok": True,
            "state": server.state.value,
            "error": server.error,
            "torch_threads": torch.get_num_threads(),
            "inference": inference_info(server),
        }

    @app.get("/v1/models")
    async def models(authorization: str | None = Header(None)):
        key = _bearer(authorization)
        if not hmac.compare_digest(key.encode(), admin_token.encode()):
            server.episodes.get(key)
        name = server.config.model.name
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "swarm"}]}

    # -- inference --------------------------------------------------------------------------------
    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request, req: ChatCompletionRequest, ep: LiveEpisode = Depends(episode_from_key)):
        max_tokens = req.max_completion_tokens or req.max_tokens or server.config.episodes.max_tokens_default
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        params = SamplingParams(
            max_new_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, n=req.n, stop=stop, seed=req.seed
        )
        model = server.config.model.name
        if req.stream:
            return _ClosingStreamingResponse(
                _sse(server, ep, req, params, model), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        # A client that hangs up stops its generation: the call is cancelled and nothing of it is recorded.
        call = asyncio.ensure_future(server.chat(ep, req.messages, req.tools, params))
        gone = asyncio.ensure_future(_client_gone(request))
        try:
            await asyncio.wait({call, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not call.done():
                call.cancel()
        if call.cancelled():
            return _error(499, "client closed the request; its generation was stopped and not recorded", "client_closed")
        completions, parsed, n_prompt = call.result()
        # Already plain JSON types: skip FastAPI's generic encoder, which walks the body on every call.
        return JSONResponse(_completion_body(completions, parsed, n_prompt, model))

    # -- episodes ---------------------------------------------------------------------------------
    @app.post("/swarm/episodes", response_model=BeginEpisodeResponse, dependencies=[Depends(require_admin)])
    async def begin_episode(req: BeginEpisodeRequest, request: Request):
        ep = server.begin_episode(req.task_id, req.client_id, req.is_eval, req.metadata, req.index)
        base = (public_url or str(request.base_url)).rstrip("/")
        return BeginEpisodeResponse(episode_id=ep.episode_id, base_url=f"{base}/v1", api_key=ep.api_key, model=server.config.model.name)

    @app.post("/v1/episode/end", response_model=EndEpisodeResponse)
    async def end_episode(req: EndEpisodeRequest, authorization: str | None = Header(None)):
        done = await server.end_episode(_bearer(authorization), req.reward, req.metadata)
        return EndEpisodeResponse(episode_id=done.episode_id, accepted=done.accepted, reason=done.reason)

    @app.post("/v1/episode/abort", response_model=EndEpisodeResponse)
    async def abort_episode(ep: LiveEpisode = Depends(episode_from_key)):
        server.abort_episode(ep, EpisodeEnd.ABORTED)
        return EndEpisodeResponse(episode_id=ep.episode_id, accepted=False, reason="aborted")

    # -- episode groups: two-phase commit (engine/pool/groups.py) ----------------------------------
    @app.post("/v1/episode/prepare", response_model=PrepareEpisodeResponse)
    async def prepare_episode(req: PrepareEpisodeRequest, authorization: str | None = Header(None)):
        # A retry after a lost answer gets the same answer if it was this group's prepare (core.py).
        out = await server.prepare_episode(_bearer(authorization), req.group_id, req.reward, req.metadata)
        return PrepareEpisodeResponse(episode_id=out.episode_id, group_id=req.group_id)

    def _group(group_id: str) -> GroupResponse:
        members = [GroupMember(episode_id=m.episode_id, accepted=m.accepted, reason=m.reason) for m in server.pool.group_table.outcomes(group_id)]
        return GroupResponse(group_id=group_id, state=server.group_state(group_id).value, members=members)

    @app.post("/swarm/groups/{group_id}/commit", response_model=GroupResponse, dependencies=[Depends(require_admin)])
    async def commit_group(group_id: str = Path(..., pattern=GROUP_ID_PATTERN)):
        await server.commit_group(group_id)
        return _group(group_id)

    @app.post("/swarm/groups/{group_id}/abort", response_model=GroupResponse, dependencies=[Depends(require_admin)])
    async def abort_group(group_id: str = Path(..., pattern=GROUP_ID_PATTERN)):
        await server.abort_group(group_id)
        return _group(group_id)

    @app.get("/swarm/groups/{group_id}", response_model=GroupResponse, dependencies=[Depends(require_admin)])
    async def group(group_id: str = Path(..., pattern=GROUP_ID_PATTERN)):
        return _group(group_id)

    # -- collaboration groups: sample exchange (engine/training/exchange.py) ------------------------
    @app.get("/swarm/exchange", response_model=ExchangeBatch, dependencies=[Depends(require_admin)])
    async def export_samples():
        collab = server.config.collaboration
        return ExchangeBatch(samples=server.export_samples(), agent=collab.agent if collab else None)

    @app.post("/swarm/exchange", dependencies=[Depends(require_admin)])
    async def import_samples(batch: ExchangeBatch):
        return await server.import_samples(batch.samples)

    # -- control plane ----------------------------------------------------------------------------
    @app.post("/swarm/configure", dependencies=[Depends(require_admin)])
    async def configure(request: Request):
        try:
            cfg = SwarmConfig.model_validate(await request.json())
        except (ValidationError, ConfigError, json.JSONDecodeError) as e:
            raise BadRequest(f"invalid config: {e}") from e
        server.configure(cfg)
        return {"ok": True, "config": cfg.model_dump(mode="json")}

    @app.post("/swarm/start", dependencies=[Depends(require_admin)])
    async def start():
        await server.start()
        return {"ok": True, "state": server.state.value}

    @app.post("/swarm/stop", dependencies=[Depends(require_admin)])
    async def stop():
        await server.stop()
        return {"ok": True, "state": server.state.value}

    @app.get("/swarm/status", response_model=StatusResponse, dependencies=[Depends(require_admin)])
    async def status():
        return server.status()

    @app.get("/swarm/pool", dependencies=[Depends(require_admin)])
    async def pool():
        return server.pool_info()

    @app.get("/swarm/pool/episodes", dependencies=[Depends(require_admin)])
    async def pool_episodes(task_id: str | None = None):
        """Pool contents at token level, for inspection and debugging (can be large)."""
        groups = server.pool.groups
        return {
            "episodes": [e.to_dict() for t, g in groups.items() if task_id in (None, t) for e in g],
        }

    @app.post("/swarm/clients/heartbeat", dependencies=[Depends(require_admin)])
    async def heartbeat(sig: ClientSignal):
        server.heartbeat(sig.client_id)
        return {"ok": True}

    @app.post("/swarm/clients/agree", dependencies=[Depends(require_admin)])
    async def agree(sig: ClientSignal):
        server.agree(sig.client_id)
        return {"ok": True, "state": server.state.value}

    return app


async def _client_gone(request: Request) -> None:
    """Return once the client has disconnected (the request body was already read in full)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that closes its body generator when it ends, however it ends.

    Starlette cancels the sending task on a client disconnect and leaves the generator suspended; closing
    it here runs its cleanup now (core.chat_stream then cancels the generation) instead of whenever the
    generator is garbage-collected.
    """

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


def _usage(n_prompt: int, n_completion: int) -> dict[str, int]:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_completion, "total_tokens": n_prompt + n_completion}


def _message(content: str, tool_calls: list[dict]) -> dict:
    msg: dict = {"role": "assistant", "content": content if content or not tool_calls else None}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return msg


def _completion_body(completions, parsed, n_prompt: int, model: str) -> dict:
    choices = []
    for i, (c, (content, tool_calls)) in enumerate(zip(completions, parsed, strict=True)):
        finish = "tool_calls" if tool_calls else c.finish_reason
        choices.append({"index": i, "message": _message(content, tool_calls), "finish_reason": finish, "logprobs": None})
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(n_prompt, sum(len(c.token_ids) for c in completions)),
    }


async def _sse(server: SwarmServer, ep: LiveEpisode, req: ChatCompletionRequest, params: SamplingParams, model: str) -> AsyncIterator[str]:
    """Real streaming: text deltas leave as the model produces tokens (with tools too, holding back only
    text that may begin a tool call); tool calls arrive whole in the final chunk."""
    cid, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())

    def chunk(choices: list[dict], usage: dict | None = None) -> str:
        body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"

    try:
        async with aclosing(server.chat_stream(ep, req.messages, req.tools, params)) as events:
            async for event in events:
                if event.kind == "delta":
                    yield chunk([{"index": event.index, "delta": {"content": event.text}, "finish_reason": None}])
                elif event.kind == "done":
                    for i, (c, (content, tool_calls)) in enumerate(zip(event.completions, event.parsed, strict=True)):
                        # What was streamed is a prefix of the final content (core.streamable); send the rest.
                        content, sent = content or "", event.sent.get(i, "")
                        delta: dict = {}
                        if content.startswith(sent) and content[len(sent) :]:
                            delta["content"] = content[len(sent) :]
                        if tool_calls:
                            delta["tool_calls"] = [{"index": j, **tc} for j, tc in enumerate(tool_calls)]
                        finish = "tool_calls" if tool_calls else c.finish_reason
                        yield chunk([{"index": i, "delta": delta, "finish_reason": finish}])
                    if (req.stream_options or {}).get("include_usage"):
                        yield chunk([], _usage(event.n_prompt, sum(len(c.token_ids) for c in event.completions)))
    except (BadRequest, EpisodeRejected, EpisodeNotFound) as e:
        yield f"data: {json.dumps(_error_body(str(e), type(e).__name__))}\n\n"
    yield "data: [DONE]\n\n"
