"""Policy losses against hand-computed values, finite differences, sample-weight semantics and masking."""

from __future__ import annotations

import math

import pytest
import torch

from engine.algorithms import (
    LossConfig,
    get_policy_loss,
    policy_loss_config,
    policy_loss_names,
    token_logprobs,
)

F64 = torch.float64


def t(x, dtype=F64):
    return torch.tensor(x, dtype=dtype)


def call(name, logp, old, adv, mask, weights=None, cfg=None, **extra):
    weights = torch.ones(logp.shape[0], dtype=F64) if weights is None else weights
    cfg = policy_loss_config(name) if cfg is None else cfg
    return get_policy_loss(name)(
        logp_BT=logp, old_logp_BT=old, advantages_B=adv, mask_BT=mask, weights_B=weights, cfg=cfg, **extra
    )


# PPO case. Token ratios r = pi/pi_old: row 0 (A = +1): 1.5, 0.5; row 1 (A = -1): 1.1, masked.
# loss_t = max(-A r, -A clip(r, 0.8, 1.2)):
#   r=1.5, A=+1: max(-1.5, -1.2) = -1.2 (clipped)   r=0.5, A=+1: max(-0.5, -0.8) = -0.5
#   r=1.1, A=-1: max(1.1, 1.1) = 1.1
OLD = t([[-1.0, -2.0], [-0.5, -3.0]])
LOG_R = t([[math.log(1.5), math.log(0.5)], [math.log(1.1), 0.0]])
ADV = t([1.0, -1.0])
MASK = t([[1, 1], [1, 0]])


def ppo_logp():
    return (OLD + LOG_R).requires_grad_()


@pytest.mark.parametrize(
    ("name", "cfg", "weights", "expected"),
    [
        ("ppo_clip", LossConfig(), [1.0, 1.0], (-1.2 - 0.5 + 1.1) / 3),  # token_mean: -0.2
        ("ppo_clip", LossConfig(), [2.0, 1.0], (2 * (-1.2 - 0.5) + 1.1) / (2 * 2 + 1)),  # -0.46
        (
            "ppo_clip",
            LossConfig(agg="seq_mean_token_mean"),
            [1.0, 1.0],
            ((-1.2 - 0.5) / 2 + 1.1) / 2,
        ),  # 0.125
        (
            "ppo_clip",
            LossConfig(agg="seq_mean_token_sum_norm", max_seq_len_norm=4),
            [1.0, 1.0],
            ((-1.2 - 0.5) / 4 + 1.1 / 4) / 2,
        ),  # -0.075
        ("dapo", None, [1.0, 1.0], (-1.28 - 0.5 + 1.1) / 3),  # clip-higher: r=1.5 clipped at 1.28
    ],
)
def test_ppo_and_dapo_by_hand(name, cfg, weights, expected):
    loss, metrics = call(name, ppo_logp(), OLD, ADV, MASK, t(weights), cfg)
    assert loss.item() == pytest.approx(expected)
    assert metrics["pg_loss"] == pytest.approx(expected)
    assert metrics["clip_frac"] == pytest.approx(1 / 3)
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1) / 3)
    # r - 1 - log r per token: 0.0945349, 0.1931472, 0.0046898
    assert metrics["approx_kl"] == pytest.approx(
        (0.5 - math.log(1.5) - 0.5 + math.log(2) + 0.1 - math.log(1.1)) / 3
    )


def test_ppo_gradient_by_hand():
    logp = ppo_logp()
    call("ppo_clip", logp, OLD, ADV, MASK)[0].backward()
    # d/dlogp of -A r is -A r; the clipped token and the masked one get 0; token_mean divides by 3
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -0.5 / 3, 1.1 / 3, 0.0])


def test_gspo_by_hand():
    # row 0 (A=+1): log ratios (log 1.2, 0) -> s = sqrt(1.2) = 1.0954 inside [0.95, 1.1] -> loss -s
    # row 1 (A=-1): log ratios (log 0.8, log 0.8) -> s = 0.8 < 0.95 -> max(0.8, 0.95) = 0.95 (clipped)
    old = t([[-1.0, -2.0], [-0.5, -1.5]])
    logp = (old + t([[math.log(1.2), 0.0], [math.log(0.8), math.log(0.8)]])).requires_grad_()
    cfg = policy_loss_config("gspo", clip_low=0.05, clip_high=0.1)
    loss, metrics = call("gspo", logp, old, ADV, torch.ones(2, 2), cfg=cfg)
    s0 = math.sqrt(1.2)
    assert loss.item() == pytest.approx((-s0 + 0.95) / 2)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["ratio_mean"] == pytest.approx((s0 + 0.8) / 2)
    loss.backward()
    # d(-A s0)/dlogp_t = -s0 / 2 per token (s depends on the mean of 2 tokens), then / 2 sequences
    assert logp.grad.flatten().tolist() == pytest.approx([-s0 / 4, -s0 / 4, 0.0, 0.0])


def random_batch(seed, B=3, T=4, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=F64) * 3
    logp = (old + scale * torch.randn(B, T, generator=g, dtype=F64)).requires_grad_()
    adv = torch.randn(B, generator=g, dtype=F64)
    mask = t([[1, 1, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1]][:B])
    return logp, old, adv, mask


@pytest.mark.parametrize("name", ["ppo_clip", "dapo", "gspo"])
@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_gradcheck_against_finite_differences(name, agg):
    logp, old, adv, mask = random_batch(3)
    norm = 4 if agg == "seq_mean_token_sum_norm" else None
    cfg = policy_loss_config(name, agg=agg, max_seq_len_norm=norm, kl_coef=0.1, entropy_coef=0.01)
    ref = old + 0.1
    ent = torch.rand(3, 4, dtype=F64, requires_grad=True)
    weights = t([1.0, 0.5, 2.0])

    def f(lp, h):
        return call(name, lp, old, adv, mask, weights, cfg, ref_logp_BT=ref, entropy_BT=h)[0]

    assert torch.autograd.gradcheck(f, (logp, ent))


@pytest.mark.parametrize("name", ["ppo_clip", "dapo", "gspo"])
def test_duplicating_a_sample_equals_doubling_its_weight(name):
    for agg, norm in (("token_mean", None), ("seq_mean_token_mean", None), ("seq_mean_token_sum_norm", 4)):
        cfg = policy_loss_config(name, agg=agg, max_seq_len_norm=norm)
        logp, old, adv, mask = random_batch(4)
        doubled, _ = call(name, logp, old, adv, mask, t([2.0, 1.0, 1.0]), cfg)
        dup = torch.cat([logp, logp[:1]])
        duplicated, _ = call(
            name,
            dup,
            torch.cat([old, old[:1]]),
            torch.cat([adv, adv[:1]]),
            torch.cat([mask, mask[:1]]),
            t([1.0, 1.0, 1.0, 1.0]),
            cfg,
        )
        (g_doubled,) = torch.autograd.grad(doubled, logp)
        (g_duplicated,) = torch.autograd.grad(duplicated, logp)
        assert duplicated.item() == pytest.approx(doubled.item())
        assert torch.allclose(g_duplicated, g_doubled)


@pytest.mark.parametrize("name", ["ppo_clip", "dapo", "gspo"])
def test_masked_tokens_get_zero_gradient_even_with_garbage(name):
    logp, old, adv, mask = random_batch(5)
    clean, _ = call(name, logp, old, adv, mask)
    clean.backward()
    garbage = logp.detach().masked_fill(mask == 0, float("-inf")).requires_grad_()
    dirty, _ = call(
        name,
        garbage,
        old.masked_fill(mask == 0, float("nan")),
        adv,
        mask,
        ref_logp_BT=old.masked_fill(mask == 0, float("inf")),
    )
    dirty.backward()
    assert dirty.item() == pytest.approx(clean.item())
    assert torch.isfinite(garbage.grad).all()
    assert (garbage.grad[mask == 0] == 0).all() and (logp.grad[mask == 0] == 0).all()
    assert torch.allclose(garbage.grad, logp.grad)


def test_kl_and_entropy_terms_by_hand():
    old = t([[-1.0, -2.0], [-0.5, -1.5]])
    logp = old.clone().requires_grad_()  # ratio 1, zero advantages: the policy term is 0
    ref = old - math.log(2.0)  # log pi - log pi_ref = log 2 -> k3 = 0.5 + log 2 - 1 = 0.193147
    k3 = 0.5 + math.log(2) - 1
    cfg = LossConfig(kl_coef=0.5, entropy_coef=0.1)
    loss, metrics = call(
        "ppo_clip",
        logp,
        old,
        t([0.0, 0.0]),
        torch.ones(2, 2),
        cfg=cfg,
        ref_logp_BT=ref,
        entropy_BT=torch.full((2, 2), 2.0, dtype=F64),
    )
    assert loss.item() == pytest.approx(0.5 * k3 - 0.1 * 2.0)
    assert metrics["kl"] == pytest.approx(k3) and metrics["entropy"] == pytest.approx(2.0)
    _, metrics = call("ppo_clip", logp, old, t([0.0, 0.0]), torch.ones(2, 2), ref_logp_BT=ref)
    assert metrics["kl"] == pytest.approx(k3)  # reported even when kl_coef is 0


def test_missing_inputs_and_bad_shapes_raise():
    logp, old, adv, mask = random_batch(6)
    with pytest.raises(ValueError, match="needs ref_logp_BT"):
        call("ppo_clip", logp, old, adv, mask, cfg=LossConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="needs entropy_BT"):
        call("gspo", logp, old, adv, mask, cfg=LossConfig(entropy_coef=0.1))
    with pytest.raises(ValueError, match=r"advantages_B has shape \(2,\)"):
        call("ppo_clip", logp, old, adv[:2], mask)
    with pytest.raises(ValueError, match="old_logp_BT has shape"):
        call("dapo", logp, old[:, :2], adv, mask)


@pytest.mark.parametrize("name", policy_loss_names())
def test_one_optimizer_step_changes_the_parameters(name):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 5)
    feats = torch.randn(2, 3, 4)
    ids = torch.randint(0, 5, (2, 3))
    before = [p.detach().clone() for p in model.parameters()]
    logp = token_logprobs(model(feats), ids)
    loss, _ = get_policy_loss(name)(
        logp_BT=logp,
        old_logp_BT=logp.detach(),
        advantages_B=torch.tensor([1.0, -1.0]),
        mask_BT=torch.ones(2, 3),
        weights_B=torch.ones(2),
        cfg=policy_loss_config(name),
    )
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
