"""Registries: one signature per kind, conflicting duplicates rejected, misses list the valid names; configs
built from registered defaults validate their invariants; the public signatures callers depend on are pinned."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from engine.algorithms import (
    AdvantageEstimator,
    DuplicateAlgorithm,
    HacpoConfig,
    LossConfig,
    PolicyLoss,
    Registry,
    SignatureMismatch,
    UnknownName,
    advantage_names,
    estimator_config,
    get_advantage_estimator,
    get_policy_loss,
    grpo_advantages,
    gspo_loss,
    hacpo_loss,
    policy_loss_config,
    policy_loss_defaults,
    policy_loss_names,
    register_advantage,
    register_policy_loss,
)


def _adv(*, rewards_N, group_ids_N, cfg):
    return rewards_N


def _other_adv(*, rewards_N, group_ids_N, cfg):
    return -rewards_N


def _loss(*, logp_BT, old_logp_BT, advantages_B, mask_BT, weights_B, cfg, ref_logp_BT=None, entropy_BT=None):
    return logp_BT.sum(), {}


def test_builtins_are_registered():
    assert advantage_names() == ("grpo", "rloo")
    assert policy_loss_names() == ("dapo", "gspo", "nll", "ppo_clip")
    assert get_advantage_estimator("grpo") is grpo_advantages
    assert get_policy_loss("gspo") is gspo_loss


def test_conflicting_duplicate_is_rejected_and_same_function_is_a_no_op():
    reg = Registry("advantage estimator", AdvantageEstimator)
    reg.register("mine")(_adv)
    reg.register("mine")(_adv)  # the same definition again (e.g. a re-import) is not a conflict
    with pytest.raises(DuplicateAlgorithm, match="'mine' is already registered"):
        reg.register("mine")(_other_adv)
    with pytest.raises(DuplicateAlgorithm):
        reg.register("mine", defaults={"eps": 0.0})(_adv)  # same function, different defaults
    assert reg.get("mine") is _adv


def test_builtin_cannot_be_overwritten_through_the_public_decorators():
    with pytest.raises(DuplicateAlgorithm, match="gspo"):
        register_policy_loss("gspo")(_loss)
    with pytest.raises(DuplicateAlgorithm, match="grpo"):
        register_advantage("grpo")(_adv)
    assert get_policy_loss("gspo") is gspo_loss


def test_lookup_error_is_a_key_error_listing_valid_names():
    with pytest.raises(KeyError) as err:
        get_policy_loss("ppo")
    assert isinstance(err.value, UnknownName)
    assert str(err.value) == "unknown policy loss 'ppo'; valid names: dapo, gspo, nll, ppo_clip"
    with pytest.raises(UnknownName, match="valid names: grpo, rloo"):
        get_advantage_estimator("gae")
    with pytest.raises(UnknownName, match="valid names: dapo, gspo, nll, ppo_clip"):
        policy_loss_defaults("nope")


def _positional(rewards_N, group_ids_N, cfg):
    return rewards_N


def _missing(*, rewards_N, cfg):
    return rewards_N


def _extra(*, rewards_N, group_ids_N, cfg, temperature=1.0):
    return rewards_N


@pytest.mark.parametrize("fn", [_positional, _missing, _extra])
def test_wrong_signature_is_rejected(fn):
    reg = Registry("advantage estimator", AdvantageEstimator)
    with pytest.raises(SignatureMismatch, match="must take exactly"):
        reg.register("bad")(fn)
    assert reg.names() == ()


def test_loss_protocol_accepts_the_loss_signature_and_names_must_be_snake_case():
    reg = Registry("policy loss", PolicyLoss)
    reg.register("fine")(_loss)
    with pytest.raises(ValueError, match="lower_snake_case"):
        reg.register("PPO-Clip")


def test_registered_defaults_build_configs():
    assert policy_loss_config("gspo") == LossConfig(clip_low=3e-4, clip_high=4e-4, agg="seq_mean_token_mean")
    assert policy_loss_config("dapo") == LossConfig(clip_low=0.2, clip_high=0.28, agg="token_mean")
    assert policy_loss_config("ppo_clip") == LossConfig()
    assert policy_loss_config("gspo", clip_high=1e-3).clip_high == 1e-3
    assert estimator_config("rloo").scale_by_std is False
    assert estimator_config("grpo", scale_by_std=False).scale_by_std is False
    with pytest.raises(UnknownName):
        policy_loss_config("ppo")


def test_loss_config_invariants_and_round_trip():
    with pytest.raises(ValidationError, match="set max_seq_len_norm"):
        LossConfig(agg="seq_mean_token_sum_norm")
    with pytest.raises(ValidationError, match="only used by"):
        LossConfig(max_seq_len_norm=128)
    with pytest.raises(ValidationError):
        LossConfig(clip_low=1.5)
    with pytest.raises(ValidationError):
        LossConfig(kl_estimator="k4")
    with pytest.raises(ValidationError):
        LossConfig(unknown_field=1)
    cfg = LossConfig(agg="seq_mean_token_sum_norm", max_seq_len_norm=64, kl_coef=1e-3)
    assert LossConfig.model_validate(cfg.model_dump()) == cfg
    with pytest.raises(ValidationError):
        cfg.kl_coef = 0.5  # frozen


def test_hacpo_naive_sharing_implies_the_other_switches_and_rejects_conflicts():
    naive = HacpoConfig(naive_sharing=True)
    assert (naive.capability_baseline, naive.omega_modulation, naive.cross_clip, naive.stepwise_schedule) == (
        False,
        False,
        False,
        False,
    )
    assert naive.alpha == 0.0
    assert HacpoConfig.model_validate(naive.model_dump()) == naive
    with pytest.raises(ValidationError, match="omega_modulation=True"):
        HacpoConfig(naive_sharing=True, omega_modulation=True)
    with pytest.raises(ValidationError, match="ratio_bounds"):
        HacpoConfig(ratio_bounds=(2.0, 10.0))


def _params(fn):
    return [
        (p.name, p.kind.name, p.default is not p.empty) for p in inspect.signature(fn).parameters.values()
    ]


def test_public_signatures_are_pinned():
    kw = "KEYWORD_ONLY"
    loss_sig = [
        ("logp_BT", kw, False),
        ("old_logp_BT", kw, False),
        ("advantages_B", kw, False),
        ("mask_BT", kw, False),
        ("weights_B", kw, False),
        ("cfg", kw, False),
        ("ref_logp_BT", kw, True),
        ("entropy_BT", kw, True),
    ]
    for name in policy_loss_names():
        assert _params(get_policy_loss(name)) == loss_sig, name
    for name in advantage_names():
        assert _params(get_advantage_estimator(name)) == [
            ("rewards_N", kw, False),
            ("group_ids_N", kw, False),
            ("cfg", kw, False),
        ]
    assert [p[0] for p in _params(hacpo_loss)] == [
        "logp_BT",
        "mask_BT",
        "lp_src_B",
        "advantages_B",
        "omega_B",
        "cross_B",
        "weights_B",
        "m",
        "cfg",
        "ref_logp_BT",
        "cross_chars_B",
    ]
