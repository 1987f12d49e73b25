"""Fixtures for inference tests: the built-in `tiny` model (random weights, real SmolLM2 tokenizer)."""

from __future__ import annotations

import pytest

from engine.config import ModelConfig
from engine.models import load_model


@pytest.fixture(scope="session")
def tiny():
    """Loaded once per session; tests that change weights must restore them."""
    return load_model(ModelConfig(name="tiny", seed=0), device="cpu")


@pytest.fixture(scope="session")
def prompts(tiny):
    """Chat prompts of clearly different lengths, so a batch of them needs left padding."""
    tok = tiny.tokenizer

    def chat(text: str) -> list[int]:
        return list(
            tok.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, return_dict=False
            )
        )

    return [
        chat("hi"),
        chat("What is the sum of 17 and 25? Show every step of the addition, please."),
        [5, 6, 7],
        chat("Name three prime numbers."),
    ]
