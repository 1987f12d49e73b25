"""sample_next: greedy rows, nucleus truncation, per-row generators, untempered logprobs."""

from __future__ import annotations

import pytest
import torch

from engine.backends.torch.sampling import sample_next


def gens(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_greedy_rows_take_argmax_and_report_untempered_logprobs():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, -1.0]])
    tokens, logprobs = sample_next(logits, [0.0, 0.0], [1.0, 1.0], gens(0, 1))
    assert tokens == [1, 0]
    expected = torch.log_softmax(logits, -1)[[0, 1], [1, 0]]
    assert torch.allclose(torch.tensor(logprobs), expected)


def test_top_p_never_samples_outside_the_nucleus():
    # probs ~ [0.64, 0.24, 0.09, 0.03]: top_p=0.7 keeps the first two tokens only.
    logits = torch.log(torch.tensor([[0.64, 0.24, 0.09, 0.03]]))
    seen = set()
    for s in range(300):
        (t,), (lp,) = sample_next(logits, [1.0], [0.7], gens(s))
        seen.add(t)
        assert abs(lp - float(torch.log_softmax(logits, -1)[0, t])) < 1e-6  # untempered, not renormalised
    assert seen == {0, 1}


def test_sampling_frequencies_follow_the_tempered_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    counts = torch.zeros(3)
    g = gens(123)
    for _ in range(3000):
        (t,), _ = sample_next(logits, [1.0], [1.0], g)
        counts[t] += 1
    assert torch.allclose(counts / counts.sum(), torch.tensor([0.5, 0.3, 0.2]), atol=0.04)
    # Temperature 0.25 sharpens p^(1/T): [0.5,0.3,0.2]^4 normalised ~ [0.85, 0.11, 0.03].
    counts.zero_()
    for _ in range(2000):
        (t,), _ = sample_next(logits, [0.25], [1.0], g)
        counts[t] += 1
    assert counts[0] / counts.sum() > 0.78


def test_a_rows_sample_depends_only_on_its_own_generator():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    together, _ = sample_next(logits, [1.0, 0.0, 1.0, 0.8], [1.0, 1.0, 0.9, 1.0], gens(7, 8, 9, 10))
    alone = [
        sample_next(logits[i : i + 1], [t], [p], gens(s))[0][0]
        for i, (t, p, s) in enumerate([(1.0, 1.0, 7), (0.0, 1.0, 8), (1.0, 0.9, 9), (0.8, 1.0, 10)])
    ]
    assert together == alone


def test_zero_probability_tokens_are_never_picked():
    logits = torch.tensor([[0.0, float("-inf"), 0.0, float("-inf")]])
    picks = {sample_next(logits, [1.0], [1.0], gens(s))[0][0] for s in range(200)}
    assert picks == {0, 2}


def _gumbel_max_reference(logits, temperature, top_p, generator):
    """One row the textbook way: tempered logits, nucleus mask, plus its own Gumbel noise, argmax."""
    scaled = logits / temperature
    if top_p < 1.0:
        probs, order = torch.softmax(scaled, -1).sort(descending=True)
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, (probs.cumsum(-1) - probs) >= top_p)
        scaled = scaled.masked_fill(drop, float("-inf"))
    u = torch.rand(logits.shape[-1], generator=generator)
    return int((scaled - torch.log(-torch.log(u))).argmax())


def test_batched_sampling_equals_each_row_drawn_alone_from_its_own_generator():
    """The fused path (noise drawn into one buffer, transformed in place, no argmax for all-sampled batches)
    picks exactly the token each row's own Gumbel-max draw picks, and leaves every generator where a
    single draw of the vocabulary would: a row never depends on the batch around it."""
    torch.manual_seed(0)
    vocab = 49152  # SmolLM2's: the size the engine samples over
    for temps, top_ps in [
        ([1.0] * 6, [1.0] * 6),  # training episodes: every row samples
        ([0.0, 1.0, 0.7, 1e-6, 1.3, 1.0], [1.0, 0.9, 1.0, 1.0, 0.5, 1.0]),  # greedy, nucleus and plain rows
    ]:
        logits = torch.randn(len(temps), vocab) * 4
        seeds = [17 * i + 1 for i in range(len(temps))]
        tokens, logprobs = sample_next(logits, temps, top_ps, gens(*seeds))
        for i, (t, p, s) in enumerate(zip(temps, top_ps, seeds, strict=True)):
            g = torch.Generator().manual_seed(s)
            want = int(logits[i].argmax()) if t <= 1e-5 else _gumbel_max_reference(logits[i], t, p, g)
            assert tokens[i] == want
            # Another float32 formula for the same log-softmax: a pairwise 49152-term sum rounds to within
            # ~log2(V) * eps = 16 * 1.2e-7 relative, so 1e-5 absolute on a log-prob of order 1-10.
            assert logprobs[i] == pytest.approx(float(torch.log_softmax(logits[i], -1)[want]), abs=1e-5)
