"""Supervised warm start: teach a model reference answers with the registry's `nll` loss, before RL.

The swarm server trains only on what its own model sampled, so reference answers (a dataset's gold, mock
transcripts) cannot enter through the episode API. This module trains on them directly with the same
trainer and loss registry, and saves a plain Hugging Face folder that any job can name as its model
(`swarm.model.name: <folder>`).

A gold episode is the prompt rendered with the model's own chat template (exactly as the server would
render the request) followed by the answer's ids and the end-of-turn token, only the answer trainable.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from engine.config import ModelConfig, SwarmConfig
from engine.tracking.chat import render_prompt
from engine.types import Author, Block, EpisodeResult, Timeline

__all__ = ["SUMMARY_FILE", "gold_episode", "supervise"]

SUMMARY_FILE = "supervised.json"  # written beside the weights: what was trained, and the loss before/after


def gold_episode(tokenizer: Any, episode_id: str, prompt: str, answer: str, eot_ids: Sequence[int]) -> EpisodeResult:
    """The prompt in the model's own chat template, then the answer and the end-of-turn token (trainable)."""
    rendered = render_prompt(tokenizer, [{"role": "user", "content": prompt}], end_of_turn_ids=list(eot_ids))
    ids = list(tokenizer(answer, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
    reply = Block(Author.LLM, answer, ids, [0.0] * len(ids), True)
    return EpisodeResult(f"sft-{episode_id}", episode_id, "sft", 0.0, [Timeline([*rendered.blocks, reply])])


def supervise(
    model: ModelConfig,
    pairs: Sequence[tuple[str, str, str]],
    out: Path,
    *,
    steps: int,
    batch: int = 16,
    lr: float = 2e-5,
    seed: int = 0,
    shuffle: bool = True,
) -> dict[str, Any]:
    """Train `model` for `steps` steps of `batch` (id, prompt, answer) pairs, cycled in order (shuffled by
    `seed` first when `shuffle`), with the `nll` loss; save the weights, tokenizer and a summary to `out`.
    A finished `out` is reused as is."""
    from engine.backends.torch.trainer import TorchTrainer
    from engine.models import load_model

    summary_path = out / SUMMARY_FILE
    if summary_path.exists() and (out / "config.json").exists():
        return json.loads(summary_path.read_text())
    if steps < 1 or batch < 1:
        raise ValueError(f"supervised warm start needs steps >= 1 and batch >= 1, got {steps} and {batch}")
    if not pairs:
        raise ValueError("supervised warm start needs at least one (prompt, answer) pair")
    t0 = time.time()
    torch.manual_seed(seed)
    loaded = load_model(model.model_copy(update={"seed": seed}))
    cfg = SwarmConfig(
        model=model.model_dump(),
        algorithm={"policy_loss": "nll"},
        training={"lr": lr, "mini_batch_size": batch, "micro_batch_size": min(8, batch)},
    )
    trainer = TorchTrainer(loaded.model, loaded.tokenizer.pad_token_id, cfg)
    order = list(pairs)
    if shuffle:
        random.Random(seed).shuffle(order)
    episodes = [gold_episode(loaded.tokenizer, i, p, a, loaded.end_of_turn_ids) for i, p, a in order]
    losses = []
    for step in range(steps):
        chunk = [episodes[(step * batch + k) % len(episodes)] for k in range(batch)]
        losses.append(float(trainer.train_step(chunk)["pg_loss"]))
    out.mkdir(parents=True, exist_ok=True)
    loaded.model.save_pretrained(out, safe_serialization=True)
    loaded.tokenizer.save_pretrained(out)
    summary = {
        "model": model.name, "pairs": len(pairs), "steps": steps, "batch": batch, "lr": lr, "seed": seed,
        "nll_first": losses[0], "nll_last": losses[-1], "wall_s": time.time() - t0,
    }
    summary_path.write_text(json.dumps(summary, indent=2))
    return summary
