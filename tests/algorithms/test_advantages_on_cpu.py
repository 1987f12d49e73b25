"""Advantage estimators against hand-computed values; uniform groups must give exactly 0."""

from __future__ import annotations

import math

import pytest
import torch

from engine.algorithms import AdvantageConfig, estimator_config, get_advantage_estimator

F64 = torch.float64
# group x: rewards (1, 0, 1), mean 2/3; group y: (0, 0), uniform
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0], dtype=F64)
GROUPS = ["x", "y", "x", "y", "x"]
BESSEL_STD_X = math.sqrt(1 / 3)  # sqrt(((1/3)^2 + (2/3)^2 + (1/3)^2) / 2)
PLAIN_STD_X = math.sqrt(2 / 9)  # same sum of squares / 3


def grpo(rewards=REWARDS, groups=GROUPS, **cfg):
    return get_advantage_estimator("grpo")(
        rewards_N=rewards, group_ids_N=groups, cfg=AdvantageConfig(eps=0.0, **cfg)
    )


def test_grpo_by_hand():
    expected = [1 / 3 / BESSEL_STD_X, 0.0, -2 / 3 / BESSEL_STD_X, 0.0, 1 / 3 / BESSEL_STD_X]  # 0.577, -1.155
    assert grpo().tolist() == pytest.approx(expected)
    expected = [1 / 3 / PLAIN_STD_X, 0.0, -2 / 3 / PLAIN_STD_X, 0.0, 1 / 3 / PLAIN_STD_X]  # 0.707, -1.414
    assert grpo(std_unbiased=False).tolist() == pytest.approx(expected)
    assert grpo(scale_by_std=False).tolist() == pytest.approx([1 / 3, 0.0, -2 / 3, 0.0, 1 / 3])  # Dr.GRPO


def test_grpo_default_eps_and_int_tensor_group_ids():
    got = get_advantage_estimator("grpo")(
        rewards_N=REWARDS, group_ids_N=torch.tensor([7, 3, 7, 3, 7]), cfg=AdvantageConfig()
    )
    assert got[0].item() == pytest.approx(1 / 3 / (BESSEL_STD_X + 1e-6))


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_uniform_and_single_sample_groups_are_exactly_zero(name):
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.7, 2.0, 3.0])  # 0.1*3/3 is not exactly 0.1 in float
    groups = ["a", "a", "a", "solo", "b", "b"]
    for cfg in (AdvantageConfig(), AdvantageConfig(scale_by_std=False)):
        adv = get_advantage_estimator(name)(rewards_N=rewards, group_ids_N=groups, cfg=cfg)
        assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
        assert adv[4].item() < 0 < adv[5].item()
        assert adv.dtype == torch.float32


def test_rloo_by_hand():
    rloo = get_advantage_estimator("rloo")
    got = rloo(rewards_N=REWARDS, group_ids_N=GROUPS, cfg=estimator_config("rloo"))
    # x: 1 - (0+1)/2, 0 - (1+1)/2, 1 - (1+0)/2
    assert got.tolist() == pytest.approx([0.5, 0.0, -1.0, 0.0, 0.5])
    got = rloo(rewards_N=REWARDS, group_ids_N=GROUPS, cfg=AdvantageConfig(eps=0.0))
    assert got.tolist() == pytest.approx(
        [0.5 / BESSEL_STD_X, 0.0, -1.0 / BESSEL_STD_X, 0.0, 0.5 / BESSEL_STD_X]
    )


def test_int_rewards_and_bad_inputs():
    adv = grpo(rewards=torch.tensor([1, 0]), groups=["g", "g"], scale_by_std=False)
    assert adv.tolist() == [0.5, -0.5]
    with pytest.raises(ValueError, match="3 entries for 5 rewards"):
        grpo(groups=["a", "b", "c"])
    with pytest.raises(ValueError, match="1-D"):
        grpo(rewards=REWARDS[None])
    with pytest.raises(ValueError, match="integer tensor"):
        grpo(groups=torch.zeros(5))
