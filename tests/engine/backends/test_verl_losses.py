"""The project's losses and advantage estimators called through verl's registries equal the project's own
on the same tensors (values and gradients). Needs verl (CPU is enough): skipped where it is not installed;
`make test` runs these in the verl venv, which has it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl pins transformers<5.11; make test runs these in the verl venv")

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

from engine.algorithms import (  # noqa: E402
    LossConfig,
    estimator_config,
    get_advantage_estimator,
    get_policy_loss,
)
from engine.backends.verl import register  # noqa: E402  (importing registers, as verl workers do)
from engine.backends.verl.config import compose_verl_config  # noqa: E402
from engine.backends.verl.dataproto import pack_samples  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.types import Author, Block, Sample, Timeline  # noqa: E402

B, R = 4, 6


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 0, 0]])
    old = -torch.rand(B, R, generator=g) * 2
    new = (old + 0.3 * torch.randn(B, R, generator=g)).requires_grad_(True)
    adv_B = torch.tensor([1.5, -0.5, 0.25, -1.0])
    w_B = torch.tensor([1.0, 0.5, 0.5, 0.25])
    return mask, old, new, adv_B, w_B


def _actor_config(tmp_path, **algorithm):
    cfg = SwarmConfig.model_validate(
        {"backend": "verl", "algorithm": algorithm, "training": {"mini_batch_size": 16}, "episodes": {"max_tokens_default": R}}
    )
    composed = compose_verl_config(cfg, model_path=str(tmp_path))
    return cfg, omega_conf_to_dataclass(composed.actor_rollout_ref.actor)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"policy_loss": "ppo_clip"},
        {"policy_loss": "dapo"},
        {"policy_loss": "gspo"},
        {"policy_loss": "gspo", "agg": "token_mean"},
        {"policy_loss": "ppo_clip", "agg": "seq_mean_token_sum_norm", "clip_low": 0.1, "clip_high": 0.3},
        {"policy_loss": "nll"},
    ],
)
def test_each_loss_through_verls_registry_equals_ours(tmp_path, algorithm):
    cfg, actor = _actor_config(tmp_path, **algorithm)
    mask, old, new, adv_B, w_B = _batch()
    a = cfg.algorithm
    ours_cfg = LossConfig(
        clip_low=a.clip_low, clip_high=a.clip_high, agg=a.agg,
        max_seq_len_norm=R if a.agg == "seq_mean_token_sum_norm" else None,
    )  # fmt: skip
    ours, _ = get_policy_loss(a.policy_loss)(
        logp_BT=new, old_logp_BT=old, advantages_B=adv_B, mask_BT=mask.float(), weights_B=w_B, cfg=ours_cfg
    )
    (g_ours,) = torch.autograd.grad(ours, new)

    fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)  # verl's lookup, verl's call convention
    theirs, metrics = fn(
        old_log_prob=old,
        log_prob=new,
        advantages=adv_B[:, None] * mask,
        response_mask=mask.bool(),
        loss_agg_mode=actor.loss_agg_mode,
        config=actor,
        rollout_is_weights=w_B[:, None] * mask,
    )
    (g_theirs,) = torch.autograd.grad(theirs, new)
    assert actor.policy_loss.loss_mode == f"swarm_{a.policy_loss}"
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-7)
    torch.testing.assert_close(g_theirs, g_ours, rtol=0, atol=1e-7)
    assert metrics["actor/swarm_pg_loss"] == pytest.approx(float(ours))


def test_swarm_ppo_clip_equals_verls_own_vanilla_ppo_with_unit_weights(tmp_path):
    """A cross-check of the adapter's conventions against verl's own implementation (dual-clip inactive:
    every ratio stays far below verl's clip_ratio_c = 3)."""
    _, actor = _actor_config(tmp_path, policy_loss="ppo_clip")
    mask, old, new, adv_B, _ = _batch(1)
    kw = dict(old_log_prob=old, log_prob=new, advantages=adv_B[:, None] * mask, response_mask=mask.bool(),
              loss_agg_mode="token-mean", config=actor)  # fmt: skip
    ours, _ = core_algos.get_policy_loss_fn("swarm_ppo_clip")(**kw)
    verls, _ = core_algos.get_policy_loss_fn("vanilla")(**kw)
    torch.testing.assert_close(ours, verls, rtol=0, atol=1e-6)


def test_micro_batches_with_verls_global_counts_add_up_to_the_whole_batch(tmp_path):
    _, actor = _actor_config(tmp_path, policy_loss="ppo_clip")
    mask, old, new, adv_B, _ = _batch(2)
    fn = core_algos.get_policy_loss_fn("swarm_ppo_clip")

    def call(rows: slice, info: dict):
        actor.global_batch_info.clear()
        actor.global_batch_info.update(info)
        m = mask[rows]
        return fn(old_log_prob=old[rows], log_prob=new[rows], advantages=adv_B[rows, None] * m,
                  response_mask=m.bool(), loss_agg_mode="token-mean", config=actor)[0]  # fmt: skip

    whole = call(slice(None), {})
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": B}
    parts = call(slice(0, 2), info) + call(slice(2, 4), info)
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-7)


def test_token_level_advantages_are_refused_not_averaged(tmp_path):
    _, actor = _actor_config(tmp_path, policy_loss="ppo_clip")
    mask, old, new, _, _ = _batch()
    per_token = torch.randn(B, R) * mask
    with pytest.raises(ValueError, match="one advantages per sequence.*swarm_\\* advantage estimator"):
        core_algos.get_policy_loss_fn("swarm_ppo_clip")(
            old_log_prob=old, log_prob=new, advantages=per_token, response_mask=mask.bool(),
            loss_agg_mode="token-mean", config=actor,
        )  # fmt: skip


@pytest.mark.parametrize(("name", "scale"), [("grpo", True), ("grpo", False), ("rloo", False), ("rloo", True)])
def test_advantage_estimators_through_verls_compute_advantage_equal_ours(name, scale):
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards = [1.0, 0.0, 0.5, 1.0, 0.0, 0.25, 0.25]
    tasks = ["a", "a", "a", "b", "b", "c", "c"]
    samples = [
        Sample(Timeline([Block(Author.ENV, "", [1, 2], None), Block(Author.LLM, "", [3, 4, 5][: 1 + i % 3], [-0.1] * (1 + i % 3), True)]),
               f"e{i}", t, r, 1.0)
        for i, (r, t) in enumerate(zip(rewards, tasks, strict=True))
    ]  # fmt: skip
    tensors, non_tensors = pack_samples(samples, 0)
    dp = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
    algo = omega_conf_to_dataclass(
        OmegaConf.create({"adv_estimator": register.verl_name(name), "norm_adv_by_std_in_grpo": scale}), AlgoConfig
    )
    out = compute_advantage(dp, adv_estimator=algo.adv_estimator, norm_adv_by_std_in_grpo=scale, config=algo)
    ours = get_advantage_estimator(name)(
        rewards_N=torch.tensor(rewards), group_ids_N=tasks, cfg=estimator_config(name, scale_by_std=scale)
    )
    m = tensors["response_mask"].float()
    torch.testing.assert_close(out.batch["advantages"], ours[:, None] * m, rtol=0, atol=1e-6)
    assert np.all(out.non_tensor_batch["uid"] == np.array(tasks, dtype=object))


def test_registration_is_idempotent_and_keeps_verls_own_names():
    names = register.register_with_verl()
    assert set(names) >= {"swarm_ppo_clip", "swarm_gspo", "swarm_grpo", "swarm_rloo"}
    assert core_algos.get_policy_loss_fn("gspo") is not core_algos.get_policy_loss_fn("swarm_gspo")
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage


def test_a_process_that_only_imports_verl_gets_the_swarm_names():
    """The `verl.plugins` entry point: what verl's Ray workers rely on besides external_lib (needs this
    package installed, as `pip install -e` does)."""
    import subprocess
    import sys

    code = (
        "import verl\nfrom verl.trainer.ppo import core_algos as c\n"
        "print(sorted(k for k in c.POLICY_LOSS_REGISTRY if k.startswith('swarm_')))\n"
        "print(sorted(k for k in c.ADV_ESTIMATOR_REGISTRY if k.startswith('swarm_')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    losses, advantages = out.stdout.strip().splitlines()[-2:]
    assert losses == "['swarm_dapo', 'swarm_gspo', 'swarm_nll', 'swarm_ppo_clip']"
    assert advantages == "['swarm_grpo', 'swarm_rloo']"
