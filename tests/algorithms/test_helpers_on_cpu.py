"""Pure helpers: masked_mean, aggregate, kl_penalty, entropy_from_logits, token_logprobs. Expected numbers
are worked out by hand in the comments; gradients are checked against finite differences in float64."""

from __future__ import annotations

import math

import pytest
import torch

from engine.algorithms import aggregate, entropy_from_logits, kl_penalty, masked_mean, token_logprobs

F64 = torch.float64
MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]


def t(x, dtype=F64):
    return torch.tensor(x, dtype=dtype)


def test_masked_mean_by_hand_and_masked_garbage_does_not_leak():
    x = t([[1.0, 2.0, float("nan")], [float("-inf"), 5.0, 6.0]]).requires_grad_()
    mask = t([[1, 1, 0], [0, 0, 0]])
    assert masked_mean(x, mask).item() == pytest.approx(1.5)  # (1 + 2) / 2
    assert masked_mean(x, mask, dim=-1).tolist() == pytest.approx([1.5, 0.0])  # empty row -> 0
    masked_mean(x, mask).backward()
    assert x.grad.tolist() == [[0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]


LOSS = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
MASK = [[1, 1, 0], [1, 1, 1]]
W = [1.0, 3.0]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token_mean", 48 / 11),  # (1*(1+2) + 3*(4+5+6)) / (1*2 + 3*3)
        ("seq_mean_token_mean", 16.5 / 4),  # (1*1.5 + 3*5) / (1 + 3)
        ("seq_mean_token_sum_norm", 3.0),  # (1*3/4 + 3*15/4) / (1 + 3), max_seq_len_norm = 4
    ],
)
def test_aggregate_by_hand(mode, expected):
    got = aggregate(t(LOSS), t(MASK), t(W), mode, max_seq_len_norm=4)
    assert got.item() == pytest.approx(expected)
    # a sequence without trainable tokens changes nothing, whatever its weight and loss
    got = aggregate(
        t(LOSS + [[7.0, 7.0, 7.0]]), t(MASK + [[0, 0, 0]]), t(W + [5.0]), mode, max_seq_len_norm=4
    )
    assert got.item() == pytest.approx(expected)


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_weights_are_sample_weights(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(3, 4, generator=g, dtype=F64)
    mask = t([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    doubled = aggregate(loss, mask, t([2.0, 1.0, 0.5]), mode, max_seq_len_norm=4)
    duplicated = aggregate(
        torch.cat([loss, loss[:1]]),
        torch.cat([mask, mask[:1]]),
        t([1.0, 1.0, 0.5, 1.0]),
        mode,
        max_seq_len_norm=4,
    )
    assert doubled.item() == pytest.approx(duplicated.item())
    scaled = aggregate(loss, mask, t([20.0, 10.0, 5.0]), mode, max_seq_len_norm=4)
    assert scaled.item() == pytest.approx(doubled.item())  # a common factor on all weights changes nothing


def test_aggregate_all_masked_is_zero_and_unknown_mode_raises():
    loss = torch.ones(2, 2, dtype=F64, requires_grad=True)
    out = aggregate(loss, torch.zeros(2, 2), t([1.0, 1.0]), "token_mean")
    out.backward()
    assert out.item() == 0.0 and loss.grad.abs().sum() == 0
    with pytest.raises(ValueError, match="valid: token_mean"):
        aggregate(loss, torch.ones(2, 2), t([1.0, 1.0]), "sum")
    with pytest.raises(ValueError, match="needs max_seq_len_norm"):
        aggregate(loss, torch.ones(2, 2), t([1.0, 1.0]), "seq_mean_token_sum_norm")


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        ("k1", math.log(2)),  # d = log 0.5 - log 0.25 = log 2
        ("k2", 0.5 * math.log(2) ** 2),  # 0.240227
        ("k3", 0.5 + math.log(2) - 1.0),  # exp(-d) + d - 1 = 0.193147
    ],
)
def test_kl_estimators_by_hand(estimator, expected):
    got = kl_penalty(t([math.log(0.5)]), t([math.log(0.25)]), estimator)
    assert got.item() == pytest.approx(expected)
    assert kl_penalty(t([-1.3]), t([-1.3]), estimator).item() == 0.0


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_gradcheck(estimator):
    g = torch.Generator().manual_seed(1)
    logp = torch.randn(2, 3, generator=g, dtype=F64, requires_grad=True)
    ref = torch.randn(2, 3, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: kl_penalty(a, b, estimator), (logp, ref))


def test_entropy_and_logprobs_by_hand():
    # row 0: logits (0, 0) -> p = (1/2, 1/2);  row 1: logits (0, log 3) -> p = (1/4, 3/4)
    logits = t([[[0.0, 0.0], [0.0, math.log(3.0)]]])
    h = entropy_from_logits(logits)
    assert h.tolist()[0] == pytest.approx(
        [math.log(2), 0.25 * math.log(4) + 0.75 * math.log(4 / 3)]
    )  # 0.693, 0.562
    lp = token_logprobs(logits, torch.tensor([[0, 1]]))
    assert lp.tolist()[0] == pytest.approx([math.log(0.5), math.log(0.75)])


def test_entropy_and_logprobs_chunking_dtype_and_gradcheck():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 3, 5, generator=g, dtype=F64, requires_grad=True)
    ids = torch.randint(0, 5, (2, 3), generator=g)
    ref_lp = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, ids, chunk_rows=1), ref_lp)
    assert torch.allclose(entropy_from_logits(logits, chunk_rows=4), entropy_from_logits(logits))
    assert torch.autograd.gradcheck(lambda z: entropy_from_logits(z, chunk_rows=4), (logits,))
    assert torch.autograd.gradcheck(lambda z: token_logprobs(z, ids, chunk_rows=4), (logits,))
    assert entropy_from_logits(logits.detach().bfloat16()).dtype == torch.float32  # upcast per chunk
    with pytest.raises(ValueError, match="target_ids_BT"):
        token_logprobs(logits, ids[:, :2])
