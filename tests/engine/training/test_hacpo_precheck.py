"""The HACPO step-0 pre-check's arithmetic against hand-computed ratios, clip bounds and shares, and its
refusal of a setting whose cross samples fall below the band."""

from __future__ import annotations

import math

import pytest

from engine.algorithms import HacpoConfig
from engine.training.hacpo_precheck import band_check, cross_mini_batches, importance_ratios

# Learner / source mean log-probs of four cross answers, and by hand: s = exp(lp_k - lp_src)
LP_K = [-1.1, -1.14, -1.5, -0.9]
LP_SRC = [-1.0, -1.0, -1.0, -1.0]
S = [0.904837, 0.869358, 0.606531, 1.105171]  # e^-0.1, e^-0.14, e^-0.5, e^0.1


def test_ratios_are_the_exponentiated_clamped_differences():
    assert importance_ratios(LP_K, LP_SRC, HacpoConfig()) == pytest.approx(S, abs=1e-6)
    assert importance_ratios([-30.0], [0.0], HacpoConfig()) == pytest.approx([math.exp(-10.0)])  # clamp c = 10
    with pytest.raises(ValueError, match="one each per answer"):
        importance_ratios([0.0], [0.0, 1.0], HacpoConfig())


def test_cross_mini_batches_count_m_as_the_trainer_does():
    # 32 own + 20 cross in mini-batches of 16: own m0, m1; cross m2 (16), m3 (4); epoch 2 repeats as m6, m7
    got = cross_mini_batches(32, 20, 16, 2, HacpoConfig())
    assert [(mb.m, mb.size) for mb in got] == [(2, 16), (3, 4), (6, 16), (7, 4)]
    assert [mb.lo for mb in got] == pytest.approx([0.85, 0.875, 0.95, 0.975])  # 1 - 0.2 + m * 0.025
    (one,) = cross_mini_batches(8, 8, 16, 1, HacpoConfig())  # one own mini-batch: the cross one is m1
    assert (one.m, one.size) == (1, 8) and one.lo == pytest.approx(0.825)
    flat = cross_mini_batches(32, 20, 16, 2, HacpoConfig(stepwise_schedule=False))
    assert [mb.lo for mb in flat] == pytest.approx([0.8] * 4)
    assert cross_mini_batches(0, 16, 1, 1, HacpoConfig())[-1].lo == 1.0  # m = 15: min(1, 0.8 + 0.375)


def test_band_share_against_hand_computed_visits():
    # cross mini-batches m2 (lo 0.85) and m3 (lo 0.875), 16 each. Per answer, the share of its visits in band:
    # s 0.905: both -> 1;  s 0.869: m2 only -> 1/2;  s 0.607: neither (below);  s 1.105: neither (above 1)
    check = band_check(LP_K, LP_SRC, n_own=32, n_cross=32, mini_batch_size=16, ppo_epochs=1, cfg=HacpoConfig())
    assert check.in_band_share == pytest.approx(1.5 / 4)
    assert check.below_lo_share == pytest.approx(1.5 / 4)
    assert check.above_1_share == pytest.approx(1 / 4)
    # alpha = 1: gradient scale s^2 inside the band: (e^-0.2 + e^-0.28 / 2) / 4
    assert check.mean_grad_scale == pytest.approx((0.818731 + 0.755784 / 2) / 4, abs=1e-6)
    assert check.deficit_median == pytest.approx(0.12)  # median of 0.1, 0.14, 0.5, -0.1
    assert check.s_median == pytest.approx((0.869358 + 0.904837) / 2, abs=1e-6)
    assert check.passed and check.n_answers == 4
    alpha3 = band_check(LP_K, LP_SRC, n_own=32, n_cross=32, mini_batch_size=16, ppo_epochs=1, cfg=HacpoConfig(alpha=3))
    assert alpha3.in_band_share == check.in_band_share  # alpha weighs the gradient, not the band
    assert alpha3.mean_grad_scale == pytest.approx((S[0] ** 4 + S[1] ** 4 / 2) / 4, abs=1e-6)


def test_without_cross_clipping_every_cross_sample_carries_gradient():
    check = band_check(LP_K, LP_SRC, n_own=32, n_cross=32, mini_batch_size=16, ppo_epochs=1, cfg=HacpoConfig(cross_clip=False))
    assert check.in_band_share == pytest.approx(1.0) and check.below_lo_share == 0.0


def test_a_planted_setting_below_the_threshold_is_refused_with_the_reason():
    # 0.375 in band: passes the default 0.3, refused at 0.4
    refused = band_check(LP_K, LP_SRC, n_own=32, n_cross=32, mini_batch_size=16, ppo_epochs=1, cfg=HacpoConfig(), threshold=0.4)
    assert not refused.passed
    assert "only 38% of cross samples" in refused.reason and "under the 40% needed" in refused.reason
    # A pair as far apart as the earlier toy's (3 nats short on 2-token answers: s = e^-1.5): none in band
    far = band_check([-2.5] * 8, [-1.0] * 8, n_own=32, n_cross=32, mini_batch_size=16, ppo_epochs=1, cfg=HacpoConfig())
    assert not far.passed and far.in_band_share == 0.0 and far.below_lo_share == pytest.approx(1.0)
    assert "longer answers" in far.reason and "0.163" in far.reason  # -ln(0.85): the deficit that still counts
    with pytest.raises(ValueError, match="at least one"):
        band_check([], [], n_own=32, n_cross=32, mini_batch_size=16, ppo_epochs=1, cfg=HacpoConfig())
