"""Gradient accumulation is exact: a mini-batch split into micro-batches of any size reaches the optimizer
with the gradient of the whole mini-batch, for every aggregation (TorchTrainer on the tiny model).

Exactness is the point, so the gradients are compared in float64. In float32, splitting a sum differently moves
an element by up to (terms x 6e-8 x the terms' magnitudes): an embedding gradient element that is a near-zero sum
of cancelling terms moved by 1.2e-6 on one CPU and not on another, which says nothing about accumulation. In
float64 (norms included, see `_float64_throughout`) the same reordering costs ~1e-16 relative per term, so `_assert_same_gradient` can demand agreement to
1e-9 of each tensor's largest element (seven orders above float64 reordering, six below any real defect: a
micro-batch weighted wrongly moves whole rows by tens of percent)."""

from __future__ import annotations

import copy
import types

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
            _assert_same_gradient(other[name], g, name)


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_micro_batches_sharing_a_pass_give_the_gradient_of_one_pass_each(tiny_model, agg, monkeypatch):
    """Packed micro-batches stacked into one forward/backward (training.pass_max_tokens) reach the optimizer
    with the gradient of one pass per micro-batch (pass_max_tokens 0), itself the mini-batch's (test above):
    same float64 bound, the sums only regrouped. The stacked path must really run, with padding: micro-batches
    of 2 rows of different packed lengths, all of them in one pass, or two per pass."""
    import engine.backends.torch.trainer as trainer_module

    episodes = _episodes(tiny_model) + [
        EpisodeResult("e", "t3", "c", 0.5, [_timeline(tiny_model, [1, 5, 6], [51, 52])]),
        EpisodeResult("f", "t3", "c", 0.0, [_timeline(tiny_model, [1, 5, 6], [61, 62, 63, 64])]),
    ]
    stacked_passes = []
    real = trainer_module.trainable_logits_stacked
    monkeypatch.setattr(
        trainer_module,
        "trainable_logits_stacked",
        lambda model, cs, plans: stacked_passes.append(len(cs)) or real(model, cs, plans),
    )
    grads = {}
    for budget in (0, 4096, 24):
        cfg = SwarmConfig(
            algorithm={"agg": agg},
            training={"mini_batch_size": 7, "micro_batch_size": 2, "pass_max_tokens": budget, "max_grad_norm": 1e9},
        )
        stacked_passes.clear()
        grads[budget] = _gradients(copy.deepcopy(tiny_model), cfg, episodes)
        grads[budget, "passes"] = list(stacked_passes)
    # 7 samples in micro-batches of 2, 2, 2, 1; the single row is not packed and runs alone
    assert grads[0, "passes"] == [] and grads[4096, "passes"] == [3] and grads[24, "passes"] == [2]
    reference = grads[0]
    assert reference and any(g.abs().sum() > 0 for g in reference.values())
    for budget in (4096, 24):
        assert grads[budget].keys() == reference.keys()
        for name, g in reference.items():
            _assert_same_gradient(grads[budget][name], g, f"budget {budget}: {name}")


def _assert_same_gradient(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    """Equal up to float64 summation order (see the module docstring for the bound)."""
    assert got.dtype == want.dtype == torch.float64, name
    scale = float(want.abs().max())
    torch.testing.assert_close(got, want, atol=1e-9 * scale, rtol=0, msg=name)


@pytest.fixture(scope="module")
def tiny_model():
    from engine.config import ModelConfig
    from engine.models import load_model

    model = load_model(ModelConfig(name="tiny", seed=0), device="cpu").model
    model.eval()
    return _float64_throughout(model)


def _float64_throughout(model):
    """The model in float64, including its RMSNorms: transformers' Llama norm computes in float32 whatever the
    model's dtype, and its float32 rounding (~6e-8 relative, measured) would otherwise set the comparison's floor.
    With the norms in float64 the three micro-batch sizes agree to ~5e-15 of each tensor's largest element."""

    def norm_in_own_dtype(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    model = model.double()
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = types.MethodType(norm_in_own_dtype, module)
    return model


def _multi_call(model, prompt: list[int], replies: list[list[int]], glue: list[int]) -> list[Timeline]:
    """The timelines of an agent loop that re-sends its whole history: call k's prompt is call k-1's prompt,
    its reply (now history, not trainable) and the environment's answer `glue`."""
    history: list[Block] = [Block(Author.ENV, "", prompt)]
    timelines = []
    for k, reply in enumerate(replies):
        context = [t for b in history for t in b.token_ids]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([context + reply])).logits[0].float(), -1)
        lp = [float(logp[len(context) - 1 + i, t]) for i, t in enumerate(reply)]
        timelines.append(Timeline([*history, Block(Author.LLM, "", reply, lp, True)], call_index=k))
        history += [Block(Author.LLM, "", reply), Block(Author.ENV, "", glue)]
    return timelines


def test_merging_changes_the_samples_but_not_the_gradient(tiny_model):
    """Episodes of equally many calls: merged into one sequence each, they train the same tokens with the same
    log-probs, advantages and per-episode weight as the unmerged calls, so the token_mean update is the same.
    (The sequence-level aggregations are not merge-invariant: they average per sequence, and merging changes
    what a sequence is.)"""
    agg = "token_mean"
    p = [1, 17, 300, 42, 9]
    # Four calls, so each unmerged call's episode weight (1/4) is exact in the float32 batch tensors; with three,
    # 1/3's float32 rounding alone moves the gradient by ~5e-9 relative, above float64 summation order.
    replies = lambda r: [[r, r + 1], [r + 2, r + 3, r + 4], [r + 5], [r + 6, r + 7]]  # noqa: E731
    episodes = [
        EpisodeResult(name, "t1", "c", reward, _multi_call(tiny_model, p, replies(r), [7, 8, 9]))
        for name, reward, r in (("a", 1.0, 100), ("b", 0.0, 200), ("c", 0.5, 300))
    ]
    grads, samples = {}, {}
    for mode in ("off", "token", "text"):
        cfg = SwarmConfig(
            algorithm={"agg": agg},
            training={"merge": mode, "mini_batch_size": 12, "micro_batch_size": 2, "max_grad_norm": 1e9},
        )
        trainer = TorchTrainer(copy.deepcopy(tiny_model), 0, cfg)
        seen: dict[str, torch.Tensor] = {}
        trainer.optimizer.step = lambda seen=seen, m=trainer.model: seen.update(
            {n: q.grad.clone() for n, q in m.named_parameters() if q.grad is not None}
        )
        samples[mode] = trainer.train_step(episodes)["samples"]
        grads[mode] = seen
    assert samples == {"off": 12, "token": 3, "text": 3}
    assert any(g.abs().sum() > 0 for g in grads["off"].values())
    for mode in ("token", "text"):
        for name, g in grads["off"].items():
            _assert_same_gradient(grads[mode][name], g, f"{mode} {name}")


def test_a_step_marks_every_trained_parameter_as_changed(tiny_model):
    """The fused AdamW kernel writes parameters without bumping their version counters; the trainer bumps
    them, because the inference engine's packed weights (packed_linear) detect new weights by them."""
    model = copy.deepcopy(tiny_model)
    trainer = TorchTrainer(model, 0, SwarmConfig(training={"mini_batch_size": 5, "micro_batch_size": 2}))
    assert trainer.optimizer.defaults["fused"]
    before = {n: (p._version, p.detach().clone()) for n, p in model.named_parameters()}
    trainer.train_step(_episodes(model))
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n][1])]
    assert changed
    for n in changed:
        assert dict(model.named_parameters())[n]._version > before[n][0], n
