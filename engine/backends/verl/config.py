"""SwarmConfig -> verl trainer config: the one map, composed on verl's own config and validated by verl.

`verl_overrides` is pure (no verl import): every verl key this project sets, with the checks that need
only the SwarmConfig (each message names the swarm field to change). `compose_verl_config` loads verl's
full trainer config as verl ships it (`verl/trainer/config/_generated_ppo_trainer.yaml`), merges the
overrides in struct mode (a key verl does not have is an error, so a verl upgrade that renames one fails
here and not on a cluster), then runs verl's own `validate_config` and builds verl's typed configs
(actor, rollout, algorithm), so anything verl would reject at launch is rejected at composition, as a
ConfigError that says it was verl.

Units differ: verl counts `data.train_batch_size` and `ppo_mini_batch_size` in prompts (each prompt is
`rollout.n` sequences), `ppo_micro_batch_size_per_gpu` in sequences. Our pool batch is in tasks and our
mini-batch in sequences, hence the multiple-of-group-size rule below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.backends.verl.names import AGG_TO_VERL, EXTERNAL_LIB, verl_name
from engine.config import SwarmConfig
from engine.errors import ConfigError

__all__ = ["VERL_MAX_LORA_RANK", "compose_verl_config", "verl_overrides"]

# vLLM's allowed LoRA ranks top out here (verl rounds a rank up to the next allowed one, see its
# get_vllm_max_lora_rank); checked here when vLLM itself is not importable (CPU machines).
VERL_MAX_LORA_RANK = 512


def verl_overrides(cfg: SwarmConfig, *, model_path: str) -> dict[str, Any]:
    """The nested dict of verl config keys this project sets for `cfg` (pure).

    `model_path` is the Hugging Face directory verl's workers load (verl cannot use the built-in `tiny`
    model, which exists only in this process, nor a GGUF file).
    """
    a, t, p, e, v = cfg.algorithm, cfg.training, cfg.pool, cfg.episodes, cfg.verl
    if t.mini_batch_size % p.group_size:
        raise ConfigError(
            f"verl counts mini-batches in prompts of pool.group_size ({p.group_size}) sequences, so "
            f"training.mini_batch_size ({t.mini_batch_size}) must be a multiple of it; set it to "
            f"{max(p.group_size, t.mini_batch_size // p.group_size * p.group_size)}"
        )
    if t.checkpoint_every_s > 0:
        raise ConfigError(
            "training.checkpoint_every_s is a torch-backend policy; verl's checkpoint manager saves on a step "
            "basis only: set training.checkpoint_every instead and checkpoint_every_s to 0"
        )
    prompt_len = e.max_context_tokens - e.max_tokens_default
    if prompt_len < 1:
        raise ConfigError(
            f"episodes.max_context_tokens ({e.max_context_tokens}) leaves no room for a prompt after "
            f"episodes.max_tokens_default ({e.max_tokens_default}); verl sizes prompt and response separately"
        )
    n_gpus = v.nnodes * v.n_gpus_per_node
    if n_gpus % v.rollout_tensor_parallel_size:
        raise ConfigError(
            f"verl.rollout_tensor_parallel_size ({v.rollout_tensor_parallel_size}) must divide the "
            f"{n_gpus} GPUs (verl.nnodes x verl.n_gpus_per_node)"
        )
    if cfg.lora.enabled and cfg.lora.rank > VERL_MAX_LORA_RANK:
        raise ConfigError(f"lora.rank {cfg.lora.rank} exceeds vLLM's largest LoRA rank {VERL_MAX_LORA_RANK}")
    sum_norm = a.agg == "seq_mean_token_sum_norm"
    lora = cfg.lora
    model: dict[str, Any] = {
        "path": str(model_path),
        "external_lib": EXTERNAL_LIB,  # registers swarm_* losses/estimators in every worker
        "lora_rank": lora.rank if lora.enabled else 0,
        "lora_alpha": lora.alpha,
        "target_modules": lora.target_modules,
    }
    rollout: dict[str, Any] = {
        "name": "vllm",
        "n": p.group_size,
        "prompt_length": prompt_len,
        "response_length": e.max_tokens_default,
        "max_model_len": e.max_context_tokens,
        "dtype": cfg.model.dtype,
        "gpu_memory_utilization": v.gpu_memory_utilization,
        "tensor_model_parallel_size": v.rollout_tensor_parallel_size,
        "calculate_log_probs": True,
        "logprobs_mode": "raw_logprobs",  # untempered, as the tracker records and the trainer recomputes
        "log_prob_micro_batch_size_per_gpu": t.micro_batch_size,
        "seed": cfg.model.seed,
    }
    if lora.enabled:  # field notes: verl's LoRA rollout needs safetensors loading; layered summon saves memory
        rollout.update(load_format="safetensors", layered_summon=True)
        # The replicas are driven over their OpenAI HTTP API under the base model's name, so the adapter is
        # merged into the weights verl syncs to vLLM (verl's `model.lora.merge`), never served as a LoRA.
        model["lora"] = {"merge": True}
    return {
        "actor_rollout_ref": {
            "model": model,
            "actor": {
                "optim": {"lr": t.lr, "weight_decay": t.weight_decay},
                "grad_clip": t.max_grad_norm,
                "ppo_epochs": t.ppo_epochs,
                "ppo_mini_batch_size": t.mini_batch_size // p.group_size,
                "ppo_micro_batch_size_per_gpu": t.micro_batch_size,
                "policy_loss": {"loss_mode": verl_name(a.policy_loss)},
                "clip_ratio": a.clip_low,
                "clip_ratio_low": a.clip_low,
                "clip_ratio_high": a.clip_high,
                "loss_agg_mode": AGG_TO_VERL[a.agg],
                "loss_scale_factor": e.max_tokens_default if sum_norm else None,
                "entropy_coeff": a.entropy_coef,
                "use_kl_loss": a.kl_coef > 0,
                "kl_loss_coef": a.kl_coef,
                "kl_loss_type": a.kl_estimator,  # verl accepts k1/k2/k3 as names of the same estimators
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": t.micro_batch_size},
            "rollout": rollout,
        },
        "algorithm": {
            "adv_estimator": verl_name(a.advantage),
            "norm_adv_by_std_in_grpo": a.scale_by_std,
            "use_kl_in_reward": False,
        },
        "data": {
            "train_batch_size": p.batch_size,
            "max_prompt_length": prompt_len,
            "max_response_length": e.max_tokens_default,
        },
        "trainer": {
            "nnodes": v.nnodes,
            "n_gpus_per_node": v.n_gpus_per_node,
            "total_training_steps": t.max_steps,
            "save_freq": t.checkpoint_every if t.checkpoint_every > 0 else -1,
            "default_local_dir": str(Path(cfg.run_dir) / "verl") if cfg.run_dir else "checkpoints/swarm",
            "resume_mode": "auto" if cfg.run_dir else "disable",
            "project_name": "swarm",
            "experiment_name": Path(cfg.run_dir).name if cfg.run_dir else "swarm",
            "logger": ["console"],
            "val_before_train": False,
            "test_freq": -1,
        },
    }


def _verl_trainer_yaml() -> Path:
    import verl

    path = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    if not path.is_file():
        raise ConfigError(
            f"verl {getattr(verl, '__version__', '?')} has no {path.name}; this translation targets verl 0.9 "
            "(install the GPU extra: pip install -e '.[gpu]')"
        )
    return path


def compose_verl_config(cfg: SwarmConfig, *, model_path: str) -> Any:
    """verl's full trainer config (an OmegaConf DictConfig) for `cfg`, validated by verl itself.

    Raises ConfigError for what the SwarmConfig cannot express in verl and for everything verl's own
    validation rejects; ImportError when verl is not installed.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    overrides = verl_overrides(cfg, model_path=model_path)
    base = OmegaConf.load(_verl_trainer_yaml())
    OmegaConf.set_struct(base, True)
    try:
        composed = OmegaConf.merge(base, overrides)
    except OmegaConfBaseException as e:
        raise ConfigError(f"verl's trainer config does not take a key this translation sets ({e}); verl 0.9 expected") from e
    _validate_with_verl(composed, use_reference_policy=cfg.algorithm.kl_coef > 0)
    return composed


def _validate_with_verl(composed: Any, *, use_reference_policy: bool) -> None:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    checked = composed
    if OmegaConf.select(composed, "actor_rollout_ref.model.lora_rank", default=0) > 0:
        try:
            import vllm  # noqa: F401
        except ImportError:
            # verl's LoRA check imports vLLM (GPU-only); the rank bound it enforces is checked in
            # verl_overrides, so validate the rest without it.
            checked = OmegaConf.merge(composed, {"actor_rollout_ref": {"model": {"lora_rank": 0}}})
    try:
        validate_config(checked, use_reference_policy=use_reference_policy, use_critic=False)
        # By their _target_, as verl's workers build them (typed conversion trips on nested defaults).
        omega_conf_to_dataclass(checked.algorithm)
        omega_conf_to_dataclass(checked.actor_rollout_ref.rollout)
    except (AssertionError, ValueError, TypeError, KeyError, OmegaConfBaseException) as e:
        raise ConfigError(f"verl rejects the translated config: {type(e).__name__}: {e}") from e
