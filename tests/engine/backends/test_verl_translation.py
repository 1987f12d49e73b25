"""SwarmConfig -> verl config: the pure map (here, no verl needed) and verl's own composition/validation
(skipped where verl is not installed; see docs/engine.md for the venv that runs them)."""

from __future__ import annotations

import pytest

from engine.backends.verl.config import verl_overrides
from engine.config import SwarmConfig
from engine.errors import ConfigError


def _cfg(**data) -> SwarmConfig:
    return SwarmConfig.model_validate({"backend": "verl", **data})


def test_overrides_map_each_field_once_with_verl_units():
    cfg = _cfg(
        algorithm={"advantage": "rloo", "policy_loss": "gspo", "kl_coef": 0.01, "kl_estimator": "k2", "entropy_coef": 0.001},
        pool={"batch_size": 8, "group_size": 4},
        training={"lr": 3e-6, "weight_decay": 0.1, "mini_batch_size": 16, "micro_batch_size": 2, "ppo_epochs": 2,
                  "max_grad_norm": 0.5, "max_steps": 7, "checkpoint_every": 0},
        episodes={"max_context_tokens": 1024, "max_tokens_default": 256},
        verl={"nnodes": 2, "n_gpus_per_node": 4, "rollout_tensor_parallel_size": 2, "gpu_memory_utilization": 0.6},
        run_dir="/runs/x",
    )  # fmt: skip
    o = verl_overrides(cfg, model_path="/models/m")
    actor = o["actor_rollout_ref"]["actor"]
    assert actor["policy_loss"] == {"loss_mode": "swarm_gspo"}
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (3e-4, 4e-4)  # gspo's registered defaults
    assert actor["loss_agg_mode"] == "seq-mean-token-mean" and actor["loss_scale_factor"] is None
    assert actor["ppo_mini_batch_size"] == 4  # 16 sequences = 4 prompts of group_size 4
    assert actor["ppo_micro_batch_size_per_gpu"] == 2 and actor["ppo_epochs"] == 2 and actor["grad_clip"] == 0.5
    assert actor["optim"] == {"lr": 3e-6, "weight_decay": 0.1}
    assert (actor["use_kl_loss"], actor["kl_loss_coef"], actor["kl_loss_type"]) == (True, 0.01, "k2")
    assert actor["entropy_coeff"] == 0.001
    assert o["algorithm"] == {"adv_estimator": "swarm_rloo", "norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False}
    model = o["actor_rollout_ref"]["model"]
    assert model["path"] == "/models/m" and model["external_lib"] == "engine.backends.verl.register"
    assert model["lora_rank"] == 0
    ro = o["actor_rollout_ref"]["rollout"]
    assert (ro["name"], ro["n"], ro["prompt_length"], ro["response_length"], ro["max_model_len"]) == (
        "vllm", 4, 768, 256, 1024,
    )  # fmt: skip
    assert ro["logprobs_mode"] == "raw_logprobs" and ro["calculate_log_probs"] is True
    assert (ro["tensor_model_parallel_size"], ro["gpu_memory_utilization"]) == (2, 0.6)
    assert o["data"] == {"train_batch_size": 8, "max_prompt_length": 768, "max_response_length": 256}
    tr = o["trainer"]
    assert (tr["nnodes"], tr["n_gpus_per_node"], tr["total_training_steps"], tr["save_freq"]) == (2, 4, 7, -1)
    assert tr["default_local_dir"] == "/runs/x/verl" and tr["resume_mode"] == "auto"


def test_overrides_lora_and_sum_norm():
    cfg = _cfg(
        lora={"enabled": True, "rank": 32, "alpha": 64},
        algorithm={"agg": "seq_mean_token_sum_norm"},
        episodes={"max_tokens_default": 128},
        training={"mini_batch_size": 16},
    )
    o = verl_overrides(cfg, model_path="/m")
    model, ro = o["actor_rollout_ref"]["model"], o["actor_rollout_ref"]["rollout"]
    assert (model["lora_rank"], model["lora_alpha"], model["target_modules"]) == (32, 64, "all-linear")
    assert (ro["load_format"], ro["layered_summon"]) == ("safetensors", True)
    actor = o["actor_rollout_ref"]["actor"]
    assert actor["loss_agg_mode"] == "seq-mean-token-sum-norm" and actor["loss_scale_factor"] == 128


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"training": {"mini_batch_size": 6}, "pool": {"group_size": 4}}, "multiple of it; set it to 4"),
        ({"episodes": {"max_context_tokens": 256, "max_tokens_default": 256}}, "leaves no room for a prompt"),
        ({"verl": {"n_gpus_per_node": 3, "rollout_tensor_parallel_size": 2}}, "must divide the 3 GPUs"),
        ({"lora": {"enabled": True, "rank": 1024}}, "exceeds vLLM's largest LoRA rank 512"),
        ({"training": {"mini_batch_size": 16, "checkpoint_every_s": 60.0}}, "step basis only"),
    ],
)
def test_what_verl_cannot_express_is_refused_naming_the_field(data, match):
    with pytest.raises(ConfigError, match=match):
        verl_overrides(_cfg(**{"training": {"mini_batch_size": 16}, **data}), model_path="/m")


# -- composed and validated by verl itself ---------------------------------------------------------


@pytest.fixture
def verl_compose():
    pytest.importorskip("verl", reason="verl pins transformers<5.11; make test runs these in the verl venv")
    from engine.backends.verl.config import compose_verl_config

    return compose_verl_config


def test_verl_composes_its_own_config_with_ours_on_top(verl_compose, tmp_path):
    from verl.utils.config import omega_conf_to_dataclass

    cfg = _cfg(algorithm={"policy_loss": "dapo"}, training={"mini_batch_size": 16, "micro_batch_size": 2})
    composed = verl_compose(cfg, model_path=str(tmp_path))
    assert composed.actor_rollout_ref.actor.policy_loss.loss_mode == "swarm_dapo"
    assert composed.algorithm.adv_estimator == "swarm_grpo"
    assert composed.actor_rollout_ref.rollout.logprobs_mode == "raw_logprobs"
    assert composed.critic.ppo_micro_batch_size_per_gpu is None  # verl's own defaults are all there
    actor = omega_conf_to_dataclass(composed.actor_rollout_ref.actor)  # verl's typed actor config
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.rollout_n) == (0.2, 0.28, 4)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        # ppo_mini_batch_size (16/4 = 4 prompts) above train_batch_size (2 prompts): verl's ActorConfig.validate
        ({"pool": {"batch_size": 2}}, r"verl rejects.*train_batch_size \(2\) must be >= actor.ppo_mini_batch_size \(4\)"),
        # 4 prompts x 4 sequences over 3 GPUs: verl's batch divisibility assertion
        ({"verl": {"n_gpus_per_node": 3}}, r"verl rejects.*real_train_batch_size \(16\) must be divisible"),
    ],
)
def test_what_verl_rejects_is_rejected_at_composition(verl_compose, tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        verl_compose(_cfg(training={"mini_batch_size": 16}, **data), model_path=str(tmp_path))
