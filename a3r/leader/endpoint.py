"""An OpenAI-compatible chat endpoint that answers with validated JSON: how it is configured (arguments,
else A3R_LLM_BASE_URL / A3R_LLM_API_KEY / A3R_LLM_MODEL) and the request/validate/retry loop.

Shared by the A3R leader's LLM policy (a3r.leader.llm) and by vibe's client generator (vibe.generate).

Every request asks for one JSON object (`response_format={"type": "json_object"}`), parsed into a
pydantic schema and then checked by the caller's `check`. A malformed or invalid answer is sent back with
the validation error, up to `max_attempts` times. An endpoint that rejects `response_format` (HTTP 400,
while the same request without it is answered) is reported once through `echo` and asked for JSON in the
prompt only from then on; its answers are validated the same way.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

__all__ = ["Endpoint", "JsonChat", "LLMOutputError", "endpoint_from_env", "why"]

T = TypeVar("T")
JSON_MODE = {"type": "json_object"}


class LLMOutputError(ValueError):
    """The endpoint gave no valid answer in `max_attempts` tries; the message has the last error."""


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    api_key: str
    model: str


def endpoint_from_env(base_url: str | None = None, model: str | None = None, api_key: str | None = None) -> Endpoint | None:
    """The configured endpoint (arguments first, then the environment), or None when no base URL is set.

    A base URL without a model is a configuration mistake, reported as a ValueError naming the fix.
    """
    base_url = base_url or os.environ.get("A3R_LLM_BASE_URL")
    model = model or os.environ.get("A3R_LLM_MODEL")
    if not base_url:
        return None
    if not model:
        raise ValueError(
            "an LLM endpoint is configured (A3R_LLM_BASE_URL) but no model: set A3R_LLM_MODEL or --llm-model"
        )
    return Endpoint(base_url, api_key or os.environ.get("A3R_LLM_API_KEY") or "none", model)


def json_text(text: str) -> str:
    """The JSON object in a reply, tolerating ```json fences and chatter around it."""
    m = re.search(r"\{.*\}", text, flags=re.S)
    if m is None:
        raise ValueError("no JSON object found in the reply")
    return m.group(0)


def why(e: Exception) -> str:
    """A validation failure in one line, as it is fed back to the LLM."""
    if isinstance(e, KeyError):
        return str(e.args[0])
    if isinstance(e, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in e.errors()
        )
    return str(e)


class JsonChat:
    """Schema-validated JSON conversations with one endpoint, under a fixed system prompt."""

    def __init__(
        self,
        endpoint: Endpoint,
        system: str,
        *,
        echo: Callable[[str], None],
        max_attempts: int = 3,
        timeout_s: float = 120.0,
    ):
        self.endpoint = endpoint
        self.name = f"llm:{endpoint.model}"
        self.system = system
        self.echo = echo
        self.max_attempts = max_attempts
        self.json_mode = True  # until the endpoint rejects response_format
        self.client = openai.OpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key, timeout=timeout_s, max_retries=2
        )

    def ask(
        self,
        prompt: str,
        schema: type[BaseModel],
        check: Callable[[Any], T],
        history: list[dict[str, str]] | None = None,
    ) -> T:
        """Ask until the reply parses as `schema` and passes `check`; the errors are fed back.

        `history` (earlier user/assistant turns) goes between the system prompt and this prompt.
        """
        messages: list[dict[str, str]] = [
            {"role": "system", "content": self.system},
            *(history or []),
            {"role": "user", "content": prompt},
        ]
        last = "no reply"
        for _ in range(self.max_attempts):
            text = self._complete(messages)
            try:
                return check(schema.model_validate_json(json_text(text)))
            except (ValidationError, ValueError, KeyError) as e:  # KeyError: an unknown variable name
                last = why(e)
            messages += [
                {"role": "assistant", "content": text},
                {
                    "role": "user",
                    "content": f"That answer is invalid: {last}. Reply with the corrected JSON object only.",
                },
            ]
        raise LLMOutputError(
            f"{self.name} gave no valid answer in {self.max_attempts} attempts; last error: {last}"
        )

    def _complete(self, messages: list[dict[str, str]]) -> str:
        """One reply, in JSON mode while the endpoint accepts it.

        A 400 in JSON mode is asked again without `response_format`: if that is answered, the endpoint
        rejects JSON mode (reported once, never asked for again); if not, the request itself is at fault
        and its error propagates.
        """
        if not self.json_mode:
            return self._create(messages)
        try:
            return self._create(messages, response_format=JSON_MODE)
        except openai.BadRequestError as rejected:
            text = self._create(messages)
            self.json_mode = False
            self.echo(
                f"{self.name}: the endpoint {self.endpoint.base_url} rejected response_format={json.dumps(JSON_MODE)} "
                f"(HTTP {rejected.status_code}: {rejected.message}); asking for JSON in the prompt only from now "
                "on (answers are validated as before)"
            )
            return text

    def _create(self, messages: list[dict[str, str]], **extra: Any) -> str:
        resp = self.client.chat.completions.create(
            model=self.endpoint.model, messages=messages, temperature=0, **extra
        )
        return resp.choices[0].message.content or ""
