"""`VllmInference`: the `InferenceEngine` protocol over a vLLM OpenAI-compatible server, token-in/token-out.

Every call sends the prompt as token ids to `/v1/completions` and asks for the sampled ids back
(`return_token_ids`, vLLM's extension) with one logprob per sampled token (`logprobs: 0`). The server is
expected to run with `--logprobs-mode raw_logprobs`, so those are log-probabilities under the untempered
policy, exactly what the trainer recomputes (processed logprobs are renormalised after temperature/top-p
and would not match). Nothing is re-tokenised: the tracker records the ids the model saw and sampled.

One adapter serves both GPU backends: `backend: vllm` points it at the `vllm serve` process it starts on
this host, and verl's rollout replicas are the same kind of server.

Pause/resume is done on this side: `pause()` stops admitting calls and returns once the calls already sent
have finished, so no request is in flight while weights are pushed; held calls go out after `resume()`.
State is guarded by a thread lock and waiters are woken with `call_soon_threadsafe`, so callers on several
event loops (or threads) are fine, as with the torch engine.

LoRA weights are pushed with vLLM's runtime adapter API (`/v1/load_lora_adapter`, needs
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` and `--enable-lora` on the server): each push loads a new,
versioned adapter name, later calls use it as their `model`, and the previous version is unloaded (safe:
pushes happen while paused, so no call still uses it).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from engine.backends.base import Completion, SamplingParams, TokenCallback
from engine.backends.threadsafe import Waiters
from engine.errors import BadRequest

__all__ = ["VllmError", "VllmInference", "completion_request", "parse_choice"]


class VllmError(RuntimeError):
    """The vLLM server failed or answered something this adapter cannot use (the message says which)."""


def completion_request(
    model: str, prompt_ids: list[int], params: SamplingParams, stop_token_ids: tuple[int, ...], *, stream: bool
) -> dict[str, Any]:
    """The `/v1/completions` body for one token-in/token-out call (pure; vLLM's extension fields included).

    `top_k=-1` and no repetition penalties keep sampling to temperature and top_p, which is what the torch
    backend does; `skip_special_tokens` only affects `text`, never the ids.
    """
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": -1,
        "n": params.n,
        "logprobs": 0,  # the sampled token's own logprob only
        "return_token_ids": True,
        "stop_token_ids": list(stop_token_ids),
        "skip_special_tokens": True,
        "stream": stream,
    }
    if params.stop:
        body["stop"] = list(params.stop)
    if params.seed is not None:
        body["seed"] = params.seed
    return body


def _token_logprobs(choice: dict[str, Any]) -> list[float]:
    lp = choice.get("logprobs") or {}
    values = lp.get("token_logprobs")
    return [] if values is None else [float(v) for v in values]


def parse_choice(choice: dict[str, Any]) -> Completion:
    """One non-streamed `/v1/completions` choice -> Completion, checking ids and logprobs line up."""
    ids = choice.get("token_ids")
    if ids is None:
        raise VllmError(
            "the vLLM server returned no token_ids: it needs `return_token_ids` support (vLLM >= 0.10.2); "
            "upgrade vLLM"
        )
    logprobs = _token_logprobs(choice)
    if len(logprobs) != len(ids):
        raise VllmError(
            f"the vLLM server returned {len(logprobs)} logprobs for {len(ids)} sampled tokens; the tracker needs "
            "one per token (request logprobs: 0, and do not run the server with prompt caching of logprobs off)"
        )
    finish = choice.get("finish_reason") or "length"
    return Completion(
        token_ids=[int(t) for t in ids],
        logprobs=logprobs,
        finish_reason="stop" if finish == "stop" else "length",
        text=choice.get("text") or "",
    )


class VllmInference:
    """Token-in/token-out generation against a vLLM server at `base_url` (the root, without /v1).

    `model` is the served model name; `stop_token_ids` are the model's end-of-turn ids (sent with every
    call, and used by tracking to cut assistant blocks). `max_model_len` and `vocab_size`, when given, let
    bad requests fail here with a message instead of a round trip.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        stop_token_ids: list[int] | tuple[int, ...],
        max_model_len: int | None = None,
        vocab_size: int | None = None,
        api_key: str | None = None,
        timeout_s: float = 3600.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.stop_token_ids: tuple[int, ...] = tuple(stop_token_ids)
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout_s, connect=30.0)
        self._lock = threading.Lock()
        self._paused = False
        self._closed = False
        self._in_flight = 0
        self._idle_waiters = Waiters()
        self._resume_waiters = Waiters()
        self.adapter_version = 0  # LoRA pushes so far (the served adapter is f"{base}-v{version}")
        self._base_model = model

    # -- InferenceEngine ---------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, on_token: TokenCallback | None = None
    ) -> list[Completion]:
        """`params.n` completions of `prompt_ids`. With `on_token`, the call is streamed and each sampled id
        is reported as vLLM sends it."""
        self._validate(prompt_ids, params)
        await self._admit()
        try:
            body = completion_request(self.model, prompt_ids, params, self.stop_token_ids, stream=on_token is not None)
            async with httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as http:
                # A client per call: the engine then belongs to no event loop (callers on several loops are
                # fine); against generation time a loopback connect is negligible.
                if on_token is None:
                    return await self._complete(http, body, params.n)
                return await self._stream(http, body, params.n, on_token)
        finally:
            self._release()

    async def pause(self) -> None:
        """Hold new calls and return once every call already sent has finished."""
        with self._lock:
            self._paused = True
            if self._in_flight == 0:
                return
            fut = self._idle_waiters.add()
        await fut

    def resume(self) -> None:
        """Release held calls. Safe from any thread."""
        with self._lock:
            self._paused = False
            waiters = self._resume_waiters.take()
        Waiters.wake(waiters)

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def close(self) -> None:
        """Refuse new calls; held calls fail with RuntimeError. The server process is its owner's to stop."""
        with self._lock:
            self._closed = True
            self._paused = False
            waiters = self._resume_waiters.take()
        Waiters.wake(waiters)

    # -- LoRA weight push --------------------------------------------------------------------------

    def push_lora(self, adapter_dir: str) -> str:
        """Load the adapter saved in `adapter_dir` (peft `save_pretrained`) as the next version, route later
        calls to it, and unload the previous version. Call while paused. Returns the new adapter name."""
        name = f"{self._base_model}-v{self.adapter_version + 1}"
        self._post_admin("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(adapter_dir)})
        old = self.model if self.adapter_version > 0 else None
        self.model, self.adapter_version = name, self.adapter_version + 1
        if old is not None:
            self._post_admin("/v1/unload_lora_adapter", {"lora_name": old})
        return name

    def _post_admin(self, path: str, body: dict[str, Any]) -> None:
        try:
            r = httpx.post(self.base_url + path, json=body, headers=self._headers, timeout=self._timeout)
        except httpx.HTTPError as e:
            raise VllmError(f"vLLM {path} failed: {type(e).__name__}: {e}") from e
        if r.status_code != 200:
            hint = (
                " (start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
                if r.status_code in (404, 405)
                else ""
            )
            raise VllmError(f"vLLM {path} answered HTTP {r.status_code}: {r.text[:500]}{hint}")

    # -- internals ---------------------------------------------------------------------------------

    def _validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        if not prompt_ids:
            raise BadRequest("prompt is empty: at least one token is needed to generate from")
        if params.n < 1 or params.max_new_tokens < 1:
            raise BadRequest(f"n ({params.n}) and max_new_tokens ({params.max_new_tokens}) must be >= 1")
        if params.temperature < 0 or not 0 < params.top_p <= 1:
            raise BadRequest(f"need temperature >= 0 and 0 < top_p <= 1, got {params.temperature}, {params.top_p}")
        if self.vocab_size is not None and (min(prompt_ids) < 0 or max(prompt_ids) >= self.vocab_size):
            raise BadRequest(f"prompt token ids must be in [0, {self.vocab_size}): tokenize with this model's tokenizer")
        if self.max_model_len is not None and len(prompt_ids) + params.max_new_tokens > self.max_model_len:
            raise BadRequest(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"model's context of {self.max_model_len}; shorten the prompt or lower max_tokens"
            )

    async def _admit(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("inference engine is closed")
                if not self._paused:
                    self._in_flight += 1
                    return
                fut = self._resume_waiters.add()
            await fut

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            waiters = []
            if self._in_flight == 0 and self._paused:
                waiters = self._idle_waiters.take()
        Waiters.wake(waiters)

    async def _post(self, http: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
        try:
            return await http.post(self.base_url + "/v1/completions", json=body)
        except httpx.HTTPError as e:
            raise VllmError(f"vLLM server at {self.base_url} unreachable: {type(e).__name__}: {e}") from e

    @staticmethod
    def _check_status(status: int, text: str) -> None:
        if status == 400:  # vLLM's validation (e.g. context length): the client's to fix
            raise BadRequest(f"vLLM rejected the request: {text[:500]}")
        if status != 200:
            raise VllmError(f"vLLM answered HTTP {status}: {text[:500]}")

    async def _complete(self, http: httpx.AsyncClient, body: dict[str, Any], n: int) -> list[Completion]:
        r = await self._post(http, body)
        self._check_status(r.status_code, r.text)
        choices = sorted(r.json().get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != n:
            raise VllmError(f"asked vLLM for {n} choices, got {len(choices)}")
        return [parse_choice(c) for c in choices]

    async def _stream(
        self, http: httpx.AsyncClient, body: dict[str, Any], n: int, on_token: TokenCallback
    ) -> list[Completion]:
        parts: list[dict[str, Any]] = [
            {"token_ids": [], "logprobs": {"token_logprobs": []}, "text": "", "finish_reason": None} for _ in range(n)
        ]
        try:
            async with http.stream("POST", self.base_url + "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    self._check_status(r.status_code, (await r.aread()).decode(errors="replace"))
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    for ch in json.loads(data).get("choices") or []:
                        i = int(ch.get("index", 0))
                        if not 0 <= i < n:
                            raise VllmError(f"vLLM streamed choice index {i} for n={n}")
                        acc = parts[i]
                        new_ids = [int(t) for t in ch.get("token_ids") or []]
                        acc["token_ids"].extend(new_ids)
                        acc["logprobs"]["token_logprobs"].extend(_token_logprobs(ch))
                        acc["text"] += ch.get("text") or ""
                        if ch.get("finish_reason"):
                            acc["finish_reason"] = ch["finish_reason"]
                        for t in new_ids:
                            on_token(i, t)
        except httpx.HTTPError as e:
            raise VllmError(f"vLLM stream from {self.base_url} broke: {type(e).__name__}: {e}") from e
        for i, p in enumerate(parts):
            if p["text"] and not p["token_ids"]:
                raise VllmError(
                    "the vLLM server streamed text without token_ids: it needs `return_token_ids` support "
                    "(vLLM >= 0.10.2); upgrade vLLM"
                )
            if p["finish_reason"] is None:
                raise VllmError(f"the vLLM stream ended before choice {i} finished (no finish_reason)")
        return [parse_choice(p) for p in parts]
