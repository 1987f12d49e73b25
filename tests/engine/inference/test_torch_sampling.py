"""sample_next: greedy rows, nucleus truncation, per-row generators, untempered logprobs."""

from __future__ import annotations

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
