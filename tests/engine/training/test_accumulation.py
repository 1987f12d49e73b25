"""Gradient accumulation is exact: a mini-batch split into micro-batches of any size reaches the optimizer
with the gradient of the whole mini-batch, for every aggregation (TorchTrainer on the tiny model)."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.backends.torch.trainer import TorchTrainer
from engine.config import SwarmConfig
from engine.types import Author, Block, EpisodeResult, Timeline


def _timeline(model, prompt: list[int], reply: list[int]) -> Timeline:
    """Prompt + reply with the model's own log-probs as the sampling-time ones (ratios start at 1)."""
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt + reply])).logits[0].float(), -1)
    lp = [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(reply)]
    return Timeline([Block(Author.ENV, "", prompt), Block(Author.LLM, "", reply, lp, True)])


def _episodes(model) -> list[EpisodeResult]:
    p, q = [1, 17, 300, 42, 9], [1, 17, 800, 3]
    return [
        EpisodeResult("a", "t1", "c", 1.0, [_timeline(model, p, [11, 12, 13, 14, 15])]),
        EpisodeResult("b", "t1", "c", 0.0, [_timeline(model, p, [21])]),
        # two calls that do not merge (the second does not extend the first): two samples, weight 1/2
        EpisodeResult(
            "c", "t2", "c", 1.0, [_timeline(model, q, [31, 32]), _timeline(model, p, [33, 34, 35])]
        ),
        EpisodeResult("d", "t2", "c", 0.0, [_timeline(model, q, [41, 42, 43])]),
    ]


def _gradients(model, cfg: SwarmConfig, episodes) -> dict[str, torch.Tensor]:
    trainer = TorchTrainer(model, 0, cfg)
    seen: dict[str, torch.Tensor] = {}

    def capture():  # the optimizer step sees the accumulated (and clipped) gradient
        seen.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})

    trainer.optimizer.step = capture
    trainer.train_step(episodes)
    return seen


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_micro_batches_accumulate_the_mini_batch_gradient(tiny_model, agg):
    episodes = _episodes(tiny_model)
    grads = []
    for micro in (5, 2, 1):
        cfg = SwarmConfig(
            algorithm={"agg": agg},
            training={"mini_batch_size": 5, "micro_batch_size": micro, "max_grad_norm": 1e9},
        )
        grads.append(_gradients(copy.deepcopy(tiny_model), cfg, episodes))
    whole, *split = grads
    assert whole and any(g.abs().sum() > 0 for g in whole.values())
    for other in split:
        assert other.keys() == whole.keys()
        for name, g in whole.items():
            torch.testing.assert_close(other[name], g, atol=1e-6, rtol=1e-4, msg=name)


@pytest.fixture(scope="module")
def tiny_model():
    from engine.config import ModelConfig
    from engine.models import load_model

    model = load_model(ModelConfig(name="tiny", seed=0), device="cpu").model
    model.eval()
    return model
