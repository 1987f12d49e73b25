"""HACPO against specs/hacpo.md, including every case of its "Corner cases that need tests" section."""

from __future__ import annotations

import math

import pytest
import torch

from engine.algorithms import (
    CapabilityTracker,
    HacpoConfig,
    UnknownName,
    capability_ratio,
    capability_weights,
    cross_lower_bound,
    get_policy_loss,
    hacpo_advantages,
    hacpo_loss,
    hacpo_omega,
    masked_mean,
    policy_loss_config,
    step_accuracy,
)

F64 = torch.float64
CAP = {"a": 0.25, "b": 0.5}  # w(a, b) = 0.5, w(b, a) = 2


def t(x, dtype=F64):
    return torch.tensor(x, dtype=dtype)


# ---- capability tracking and ratios ----


def test_tracker_window_floor_unknown_agent_and_state_round_trip():
    tracker = CapabilityTracker(window=5)
    for acc in (1.0, 0.0, 0.0, 0.0, 0.0, 0.5):
        tracker.update({"a": acc, "b": 0.0})
    assert tracker.capability("a") == pytest.approx(0.1)  # last 5: (0 + 0 + 0 + 0 + 0.5) / 5
    assert tracker.capability("b") == 1e-8  # floored
    with pytest.raises(UnknownName, match=r"known agents: \['a', 'b'\]"):
        tracker.capability("c")
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        tracker.update({"a": 1.5})
    copy = CapabilityTracker.from_state_dict(tracker.state_dict())
    copy.update({"a": 1.0})
    assert copy.capability("a") == pytest.approx(0.3)  # (0 + 0 + 0 + 0.5 + 1) / 5
    assert CapabilityTracker.from_config(HacpoConfig(capability_window=2)).window == 2


def test_step_accuracy_counts_rewards_above_zero():
    assert step_accuracy(t([1.0, 0.0, 0.5, -1.0])) == 0.5
    with pytest.raises(ValueError, match="no rewards"):
        step_accuracy(t([]))


@pytest.mark.parametrize(("p_k", "p_j"), [(0.3, 0.6), (1e-8, 0.9), (0.7, 0.01), (0.5, 0.5)])
def test_w_kj_times_w_jk_is_one_before_clipping(p_k, p_j):
    assert capability_ratio(p_k, p_j, None) * capability_ratio(p_j, p_k, None) == pytest.approx(1.0)


def test_ratios_are_clipped_and_one_for_own_samples():
    assert capability_ratio(1.0, 1e-8, (0.1, 10.0)) == 10.0
    assert capability_ratio(1e-8, 1.0, (0.1, 10.0)) == 0.1
    kw = {"sources_N": ["a", "b", "a"], "learner": "a", "capability": CAP}
    assert capability_weights(**kw, cfg=HacpoConfig()).tolist() == [1.0, 0.5, 1.0]  # w(a, src) = P_a / P_src
    assert hacpo_omega(**kw, cfg=HacpoConfig()).tolist() == [1.0, 2.0, 1.0]  # omega(src -> a) = P_src / P_a
    assert capability_weights(**kw, cfg=HacpoConfig(capability_baseline=False)).tolist() == [1.0, 1.0, 1.0]
    assert hacpo_omega(**kw, cfg=HacpoConfig(omega_modulation=False)).tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(UnknownName, match="no capability for agent 'z'"):
        hacpo_omega(sources_N=["z"], learner="a", capability=CAP, cfg=HacpoConfig())


# ---- advantages ----

# g1: a:(1, 0) b:(1, 1); g2: a:(1, 1) b:(1, 0); g3 uniform. Bessel std of g1 and g2 = sqrt(0.75 / 3) = 0.5.
SOURCES = ["a", "a", "b", "b"] * 3
GROUPS = ["g1"] * 4 + ["g2"] * 4 + ["g3"] * 4
REWARDS = t([1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0])


def advantages(learner, **cfg):
    return hacpo_advantages(
        rewards_N=REWARDS,
        group_ids_N=GROUPS,
        sources_N=SOURCES,
        learner=learner,
        capability=CAP,
        cfg=HacpoConfig(adv_eps=0.0, **cfg),
    )


def test_capability_aware_advantages_by_hand():
    out = advantages("a")
    # g1: mu_a = (1 + 0 + 0.5 + 0.5) / 4 = 0.5;  g2: mu_a = (1 + 1 + 0.5 + 0) / 4 = 0.625
    assert out.advantages_N.tolist() == pytest.approx([1, -1, 1, 1, 0.75, 0.75, 0.75, -1.25, 0, 0, 0, 0])
    assert out.baseline_N[[0, 4]].tolist() == pytest.approx([0.5, 0.625])
    assert not out.guarded_N.any()
    assert out.uniform_N.tolist() == [False] * 8 + [True] * 4


def test_mu_guard_falls_back_to_the_learners_own_mean():
    out = advantages("b")
    # g1: mu_b = (2 + 0 + 1 + 1) / 4 = 1.0, not above 1 -> kept;  A = (R - 1) / 0.5
    # g2: mu_b = (2 + 2 + 1 + 0) / 4 = 1.25 > 1 -> mean of b's own rewards (1, 0) = 0.5;  A = (R - 0.5) / 0.5
    assert out.advantages_N.tolist() == pytest.approx([0, -2, 0, 0, 1, 1, 1, -1, 0, 0, 0, 0])
    assert out.guarded_N.tolist() == [False] * 4 + [True] * 4 + [False] * 4
    assert out.baseline_N[4].item() == pytest.approx(0.5)
    # a group without any of the learner's samples falls back to its plain mean: w(b, a) = 10 here
    alone = hacpo_advantages(
        rewards_N=t([1, 1, 0]),
        group_ids_N=["g"] * 3,
        sources_N=["a"] * 3,
        learner="b",
        capability={"a": 0.01, "b": 0.9},
        cfg=HacpoConfig(),
    )
    assert alone.guarded_N.all() and alone.baseline_N[0].item() == pytest.approx(2 / 3)
    assert advantages("b", max_reward=2.0).advantages_N[4].item() == pytest.approx((1 - 1.25) / 0.5)


def test_ablation_without_capability_baseline_uses_the_plain_mean():
    out = advantages("a", capability_baseline=False)
    assert out.advantages_N[:4].tolist() == pytest.approx([0.5, -1.5, 0.5, 0.5])  # (R - 0.75) / 0.5


@pytest.mark.parametrize(
    "cfg", [HacpoConfig(), HacpoConfig(omega_modulation=False), HacpoConfig(naive_sharing=True)]
)
def test_uniform_groups_give_zero_advantage_and_zero_gradient_with_and_without_omega(cfg):
    sources = ["a", "a", "b", "b"]
    out = hacpo_advantages(
        rewards_N=t([1, 1, 1, 1]),
        group_ids_N=["q"] * 4,
        sources_N=sources,
        learner="a",
        capability=CAP,
        cfg=cfg,
    )
    assert out.advantages_N.tolist() == [0.0] * 4
    omega = hacpo_omega(sources_N=sources, learner="a", capability=CAP, cfg=cfg)
    logp = torch.randn(4, 3, dtype=F64, requires_grad=True)
    loss, _ = hacpo_loss(
        logp_BT=logp,
        mask_BT=torch.ones(4, 3),
        lp_src_B=logp.detach().mean(-1) + 0.05,
        advantages_B=out.advantages_N,
        omega_B=omega,
        cross_B=t([0, 0, 1, 1]).bool(),
        weights_B=torch.ones(4),
        m=0,
        cfg=cfg,
    )
    loss.backward()
    assert loss.item() == 0.0 and (logp.grad == 0).all()


def test_monte_carlo_capability_weighted_baseline_is_unbiased_for_bernoulli_agents():
    p = {"k": 0.3, "j": 0.6}
    G, n_groups = 4, 10_000
    sources = (["k"] * G + ["j"] * G) * n_groups
    gen = torch.Generator().manual_seed(20_260_302)
    rewards = torch.bernoulli(t([p[s] for s in sources]), generator=gen)
    groups = torch.arange(n_groups).repeat_interleave(2 * G)
    # The guard is a deliberate bias for mu > 1; the weaker learner's mu is at most (4 + 4 * 0.5) / 8 < 1.
    for learner, cfg in (("k", HacpoConfig()), ("j", HacpoConfig(max_reward=math.inf))):
        mu = hacpo_advantages(
            rewards_N=rewards, group_ids_N=groups, sources_N=sources, learner=learner, capability=p, cfg=cfg
        ).baseline_N[:: 2 * G]
        stderr = (mu.std() / math.sqrt(n_groups)).item()
        assert abs(mu.mean().item() - p[learner]) < 4 * stderr, learner
        plain = hacpo_advantages(
            rewards_N=rewards,
            group_ids_N=groups,
            sources_N=sources,
            learner=learner,
            capability=p,
            cfg=HacpoConfig(capability_baseline=False),
        ).baseline_N[:: 2 * G]
        assert (
            abs(plain.mean().item() - p[learner]) > 0.1
        )  # the plain joint mean (0.45) is biased: test has power


# ---- per-sequence objective ----


def random_own_batch(seed, scale):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 4, generator=g, dtype=F64) * 3
    logp = (old + scale * torch.randn(3, 4, generator=g, dtype=F64)).requires_grad_()
    mask = t([[1, 1, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1]])
    return logp, old, torch.randn(3, generator=g, dtype=F64), mask


@pytest.mark.parametrize("scale", [0.0, 3e-4, 0.3])  # s = 1 (m = 0, before any update), near the clip, far
def test_own_samples_match_gspo(scale):
    logp, old, adv, mask = random_own_batch(7, scale)
    cfg = HacpoConfig()
    h_loss, h_metrics = hacpo_loss(
        logp_BT=logp,
        mask_BT=mask,
        lp_src_B=masked_mean(old, mask, dim=-1),
        advantages_B=adv,
        omega_B=t([3.0, 3.0, 3.0]),
        cross_B=torch.zeros(3, dtype=torch.bool),
        weights_B=torch.ones(3),
        m=0,
        cfg=cfg,
    )
    (h_grad,) = torch.autograd.grad(h_loss, logp)
    g_loss, g_metrics = get_policy_loss("gspo")(
        logp_BT=logp,
        old_logp_BT=old,
        advantages_B=adv,
        mask_BT=mask,
        weights_B=torch.ones(3),
        cfg=policy_loss_config("gspo", clip_low=cfg.eps_low, clip_high=cfg.eps_high),
    )
    (g_grad,) = torch.autograd.grad(g_loss, logp)
    assert h_loss.item() == pytest.approx(g_loss.item())
    assert torch.allclose(h_grad, g_grad)
    assert h_metrics["own_clip_frac"] == pytest.approx(g_metrics["clip_frac"])


def cross_case(s, A, omega, m, cfg, logp_rows=None):
    """Cross rows of 2 tokens with sequence ratio exactly s (lp_src = lp_k - log s)."""
    logp = (t(logp_rows) if logp_rows else -torch.ones(len(s), 2, dtype=F64)).requires_grad_()
    lp_src = logp.detach().mean(-1) - t(s).log()
    loss, metrics = hacpo_loss(
        logp_BT=logp,
        mask_BT=torch.ones_like(logp),
        lp_src_B=lp_src,
        advantages_B=t(A),
        omega_B=t(omega),
        cross_B=torch.ones(len(s), dtype=torch.bool),
        weights_B=torch.ones(len(s)),
        m=m,
        cfg=cfg,
    )
    loss.backward()
    return loss.item(), logp.grad, metrics


@pytest.mark.parametrize("alpha", [0.0, 1.0, 3.0])
def test_cross_gradient_zero_outside_band_and_closed_form_inside(alpha):
    # m = 0: lo = 0.8. s = 1.1 (above 1), 0.7 (below lo), 0.9 (inside)
    loss, grad, metrics = cross_case(
        [1.1, 0.7, 0.9],
        [1.0, -0.5, 2.0],
        [2.0, 2.0, 0.5],
        0,
        HacpoConfig(alpha=alpha),
        logp_rows=[[-1.0, -2.0], [-0.5, -1.5], [-2.0, -1.0]],
    )
    # obj = sc^(alpha+1) * omega * A with sc = 1, 0.8, 0.9; loss = -mean
    obj = [1.0 * 2.0 * 1.0, 0.8 ** (alpha + 1) * 2.0 * -0.5, 0.9 ** (alpha + 1) * 0.5 * 2.0]
    assert loss == pytest.approx(-sum(obj) / 3)
    # inside: grad = -(1/3) * s^(alpha+1) * omega * A * d(mean of 2 log-probs) = -(1/3) * 0.9^(alpha+1) * 1 / 2
    assert grad.flatten().tolist() == pytest.approx(
        [0, 0, 0, 0, -(0.9 ** (alpha + 1)) / 6, -(0.9 ** (alpha + 1)) / 6]
    )
    assert metrics["cross_below_lo_frac"] == pytest.approx(1 / 3)
    assert metrics["cross_above_1_frac"] == pytest.approx(1 / 3)
    assert (metrics["cross_lo"], metrics["cross_s_min"], metrics["cross_s_max"]) == pytest.approx(
        (0.8, 0.7, 1.1)
    )


def test_stepwise_schedule_raises_the_lower_clip():
    cfg = HacpoConfig()
    assert [cross_lower_bound(m, cfg) for m in (0, 4, 8, 100)] == pytest.approx([0.8, 0.9, 1.0, 1.0])
    assert cross_lower_bound(4, HacpoConfig(stepwise_schedule=False)) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="from 0"):
        cross_lower_bound(-1, cfg)
    expected = -(0.85**2) * 1.0 / 2  # alpha = 1, omega = 1, A = 1, one sequence of 2 tokens
    assert cross_case([0.85], [1.0], [1.0], 0, cfg)[1].tolist()[0] == pytest.approx([expected] * 2)
    assert (cross_case([0.85], [1.0], [1.0], 4, cfg)[1] == 0).all()  # lo = 0.9 > s
    assert cross_case([0.85], [1.0], [1.0], 4, HacpoConfig(stepwise_schedule=False))[1].tolist()[
        0
    ] == pytest.approx([expected] * 2)
    assert (cross_case([0.99], [1.0], [1.0], 8, cfg)[1] == 0).all()  # lo = 1: no cross gradient left


def test_ablation_without_cross_clipping_keeps_the_gradient_above_one():
    _, grad, _ = cross_case([1.1], [2.0], [0.5], 0, HacpoConfig(cross_clip=False, alpha=1.0))
    assert grad.tolist()[0] == pytest.approx([-(1.1**2) * 0.5 * 2.0 / 2] * 2)


def test_naive_sharing_treats_cross_samples_as_on_policy():
    # value A and gradient A * grad lp_k whatever lp_src (s = 50 here) and omega
    loss, grad, _ = cross_case([50.0], [-0.7], [5.0], 3, HacpoConfig(naive_sharing=True))
    assert loss == pytest.approx(0.7)
    assert grad.tolist()[0] == pytest.approx([0.35, 0.35])


def test_per_character_ratio_is_tokenizer_neutral_and_has_the_closed_form_gradient():
    # one reply "12345" (5 characters) with the same sequence log-prob -2.5 under both agents: the source
    # cut it into 5 byte tokens (L_j = 5, lp_j = -0.5), the learner into 2 BPE tokens (-1.0, -1.5)
    lp_j, L_j, chars = -0.5, 5, 5.0

    def case(cfg, lp_src):
        logp = t([[-1.0, -1.5]]).requires_grad_()
        loss, metrics = hacpo_loss(
            logp_BT=logp, mask_BT=torch.ones_like(logp), lp_src_B=t([lp_src]), advantages_B=t([2.0]),
            omega_B=t([0.5]), cross_B=torch.ones(1, dtype=torch.bool), weights_B=torch.ones(1), m=0, cfg=cfg,
            cross_chars_B=t([chars]),
        )
        loss.backward()
        return loss.item(), logp.grad, metrics

    # per token: s = exp(-1.25 - (-0.5)) = 0.47 < lo = 0.8, so the sample is discarded
    _, grad, metrics = case(HacpoConfig(), lp_j)
    assert metrics["cross_s_mean"] == pytest.approx(math.exp(-0.75)) and metrics["cross_below_lo_frac"] == 1.0
    assert (grad == 0).all()
    # per character: s = exp((-2.5 - L_j * lp_j) / 5) = 1, inside [lo, 1]; obj = s^2 * omega * A = 1
    loss, grad, metrics = case(HacpoConfig(cross_normalization="char"), lp_j * L_j / chars)
    assert metrics["cross_s_mean"] == pytest.approx(1.0) and metrics["cross_below_lo_frac"] == 0.0
    assert loss == pytest.approx(-1.0)
    # obj = sc * sg(sc) * omega * A, d sc / d lp_k = s, d lp_k / d logp_t = 1 / chars: grad = -s^2 omega A / chars
    assert grad.tolist()[0] == pytest.approx([-0.5 * 2.0 / chars] * 2)
    with pytest.raises(ValueError, match="cross_chars_B"):
        hacpo_loss(
            logp_BT=t([[-1.0]]), mask_BT=t([[1.0]]), lp_src_B=t([-1.0]), advantages_B=t([1.0]), omega_B=t([1.0]),
            cross_B=torch.ones(1, dtype=torch.bool), weights_B=torch.ones(1), m=0,
            cfg=HacpoConfig(cross_normalization="char"),
        )


def test_kl_applies_to_own_samples_only():
    logp = t([[-1.0, -2.0], [-0.5, -1.5]]).requires_grad_()
    ref = logp.detach() - t([[math.log(2.0)] * 2, [math.log(4.0)] * 2])  # own: log 2, cross: log 4
    loss, metrics = hacpo_loss(
        logp_BT=logp,
        mask_BT=torch.ones(2, 2),
        lp_src_B=logp.detach().mean(-1),
        advantages_B=t([0.0, 0.0]),
        omega_B=t([1.0, 1.0]),
        cross_B=t([0, 1]).bool(),
        weights_B=torch.ones(2),
        m=0,
        cfg=HacpoConfig(kl_coef=1.0),
        ref_logp_BT=ref,
    )
    k3 = 0.5 + math.log(2) - 1
    assert loss.item() == pytest.approx(k3) and metrics["kl"] == pytest.approx(k3)
    loss.backward()
    assert (logp.grad[1] == 0).all() and (logp.grad[0] != 0).all()
    with pytest.raises(ValueError, match="needs ref_logp_BT"):
        hacpo_loss(
            logp_BT=logp,
            mask_BT=torch.ones(2, 2),
            lp_src_B=t([0.0, 0.0]),
            advantages_B=t([0.0, 0.0]),
            omega_B=t([1.0, 1.0]),
            cross_B=t([0, 1]).bool(),
            weights_B=torch.ones(2),
            m=0,
            cfg=HacpoConfig(kl_coef=1.0),
        )


def _mixed(logp, mask, weights, rows):
    lp_src = t([-1.0, -1.2, -0.8, -1.1])[rows]
    return hacpo_loss(
        logp_BT=logp,
        mask_BT=mask,
        lp_src_B=lp_src,
        advantages_B=t([1.0, -1.0, 0.5, 2.0])[rows],
        omega_B=t([1.0, 2.0, 0.5, 1.0])[rows],
        cross_B=t([0, 1, 1, 0]).bool()[rows],
        weights_B=weights,
        m=1,
        cfg=HacpoConfig(eps_low=0.2, eps_high=0.2),
    )[0]


def test_weights_are_sample_weights_and_masked_tokens_get_zero_gradient():
    logp = (
        -torch.ones(4, 3, dtype=F64) + 0.1 * torch.arange(12, dtype=F64).view(4, 3).sin()
    ).requires_grad_()
    mask = t([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 1, 1]])
    doubled = _mixed(logp, mask, t([2.0, 1.0, 1.0, 1.0]), [0, 1, 2, 3])
    rows = [0, 1, 2, 3, 0]
    duplicated = _mixed(logp[rows], mask[rows], torch.ones(5, dtype=F64), rows)
    assert duplicated.item() == pytest.approx(doubled.item())
    doubled.backward()
    garbage = logp.detach().masked_fill(mask == 0, float("-inf")).requires_grad_()
    dirty = _mixed(garbage, mask, t([2.0, 1.0, 1.0, 1.0]), [0, 1, 2, 3])
    dirty.backward()
    assert dirty.item() == pytest.approx(doubled.item())
    assert (garbage.grad[mask == 0] == 0).all() and torch.allclose(garbage.grad, logp.grad)
    assert (logp.grad[mask == 1] != 0).any()
