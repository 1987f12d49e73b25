"""One typed configuration for a swarm server, mapped once to each backend.

Every field documents its trade-off. The config is frozen and serialisable (`model_dump()` /
`SwarmConfig.model_validate(...)`), so clients can send it to a server and A3R can store and replay it.
Cross-field invariants are checked at construction with messages that say what to change.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.algorithms.config import HacpoConfig
from engine.errors import ConfigError


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelConfig(_Frozen):
    name: str = Field("tiny", description="Built-in name (`tiny`, `tiny-bytes`, `smollm2-135m`, `gemma3-270m`), a local HF directory or a .gguf file.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Weights dtype. float32 on CPU; bfloat16 halves memory on GPUs. A half-precision model trains "
        "through float32 master copies of its trainable weights (torch trainer).",
    )
    seed: int = Field(0, description="Seed for built-in random weights (tiny) and for sampling defaults.")


class LoraConfig(_Frozen):
    enabled: bool = Field(False, description="Train a LoRA adapter instead of full weights (peft).")
    rank: int = Field(8, ge=1, description="Adapter rank r. Higher is more expressive and slower.")
    alpha: int = Field(16, ge=1, description="LoRA scaling numerator (scale = alpha / rank).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter input.")
    target_modules: str | list[str] = Field("all-linear", description="Modules to adapt; peft's 'all-linear' by default.")


class AlgorithmConfig(_Frozen):
    """Fields left unset take the chosen loss's registered defaults (e.g. GSPO's 3e-4/4e-4 clip)."""

    advantage: str = Field("grpo", description="Advantage estimator, a key of engine.algorithms' registry.")
    policy_loss: str = Field("ppo_clip", description="Policy loss, a key of engine.algorithms' registry (ppo_clip, gspo, dapo, ...).")
    scale_by_std: bool = Field(True, description="GRPO: divide by the group std. False is Dr.GRPO (no length/difficulty bias).")
    clip_low: float = Field(0.2, ge=0, lt=1, description="Lower ratio clip epsilon. GSPO uses ~3e-4 (sequence-level ratios are tiny).")
    clip_high: float = Field(0.2, gt=0, description="Upper ratio clip epsilon. DAPO clip-higher uses 0.28.")
    agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] = Field(
        "token_mean", description="How token losses become one number. token_mean weighs long answers more."
    )
    kl_coef: float = Field(0.0, ge=0, description="KL-to-reference penalty; 0 disables the reference model (saves memory).")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator; k3 is low-variance and non-negative.")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient.")

    @model_validator(mode="before")
    @classmethod
    def _loss_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        from engine.algorithms import policy_loss_defaults, policy_loss_names

        loss = data.get("policy_loss", "ppo_clip")
        if loss in policy_loss_names():
            data = {**{k: v for k, v in policy_loss_defaults(loss).items() if k in cls.model_fields}, **data}
        return data


class PoolConfig(_Frozen):
    policy: Literal["episode_count", "task_count", "nondegenerate_task_count", "all_clients_agree", "any_client_agrees"] = Field(
        "task_count", description="When the pool triggers a training step (see docs/engine.md, pool policies)."
    )
    batch_size: int = Field(4, ge=1, description="B: tasks (or episodes / B*N for episode_count) per training step.")
    group_size: int = Field(4, ge=1, description="N: episodes per task (GRPO group). A task is complete at N episodes.")
    client_share: dict[str, float] = Field(
        default_factory=dict,
        description="Per-client cap on the share of a batch's episodes (task mixes / cocktail training), e.g. {'math': 0.5}.",
    )


class OldLogprobs(str, Enum):
    """Which log-probs a step's policy ratio takes as the old policy's (`training.old_logprobs`)."""

    AUTO = "auto"  # RECOMPUTED for a half-precision model or the vllm backend, else SAMPLED
    SAMPLED = "sampled"  # as recorded at sampling time
    RECOMPUTED = "recomputed"  # the trainer's own forward on the step's weights, before its first update


class TrainingConfig(_Frozen):
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0)
    ppo_epochs: int = Field(1, ge=1, description="Passes over each batch. >1 makes later passes off-policy (clip matters).")
    mini_batch_size: int = Field(16, ge=1, description="Sequences per optimizer step.")
    micro_batch_size: int = Field(
        4,
        ge=1,
        description="Sequences per micro-batch (gradient accumulation bounds memory). Packed micro-batches "
        "may share a forward/backward up to pass_max_tokens; lower that too on OOM.",
    )
    pass_max_tokens: int = Field(
        4096,
        ge=0,
        description="Packed micro-batches of a mini-batch share one forward/backward up to this many tokens "
        "(rows x longest packed row): fewer, larger passes, each weight's gradient written once per pass. "
        "Bounds the pass's activation memory; lower it on OOM, 0 runs one micro-batch per pass.",
    )
    max_grad_norm: float = Field(1.0, gt=0)
    max_steps: int | None = Field(None, ge=1, description="Stop training after this many steps (None: until stopped).")
    checkpoint_every: int = Field(1, ge=0, description="Checkpoint every k steps (0: never). Pool contents are saved too.")
    checkpoint_every_s: float = Field(
        0.0,
        ge=0,
        description="Time basis (0: off): of the steps `checkpoint_every` names, write only those that end at "
        "least this many seconds after the last checkpoint (or the server's start). A crash then loses at most "
        "this long plus one step and one checkpoint write of training, retrained from the pool's journal.",
    )
    final_checkpoint: bool = Field(
        True,
        description="Write the weights when max_steps is reached (without optimizer state: training is over). "
        "Off for jobs that delete their checkpoints at the end anyway. Needs checkpoint_every > 0.",
    )
    merge: Literal["off", "token", "text"] = Field(
        "token", description="Timeline merging: token ids (exact) or text (merges more, tolerates tokenizer drift)."
    )
    strip_reasoning: bool = Field(
        False,
        description="Text merging ignores <think>...</think> spans, so replies of templates that drop earlier "
        "reasoning from the history (Qwen3-style) still merge. Needs merge='text'; see engine.tracking.merging "
        "for the context mismatch it trades for fewer samples.",
    )
    share_prefix: bool = Field(
        True, description="Run a prefix common to a micro-batch's rows (a group's prompt) once per forward."
    )
    old_logprobs: OldLogprobs = Field(
        OldLogprobs.AUTO,
        description="The old policy's log-probs in the PPO/GSPO ratio. `sampled`: those recorded at sampling time. "
        "`recomputed`: the trainer's own forward on the step's weights before its first update (the first "
        "mini-batch's comes with its forward; later ones cost a forward without gradient). `auto`: recomputed "
        "for a bfloat16/float16 model and for the vllm backend, where the sampling-time values differ from the "
        "trainer's by about 0.04 nats a token and a sequence ratio clipped at 3e-3 (GSPO) would clip most "
        "samples; sampled otherwise (float32 on the torch backend: about 1e-5 nats a token).",
    )


class EpisodeConfig(_Frozen):
    idle_timeout_s: float = Field(600.0, gt=0, description="An episode with no call or end for this long is aborted.")
    total_timeout_s: float = Field(3600.0, gt=0, description="An episode older than this is aborted.")
    max_tokens_default: int = Field(256, ge=1, description="max_tokens when a request gives none.")
    max_context_tokens: int = Field(4096, ge=16, description="Prompt + completion cap; longer requests get HTTP 400.")
    max_request_bytes: int = Field(
        8 * 1024 * 1024,
        ge=4096,
        description="Largest HTTP request body the server reads; a bigger one gets HTTP 413 before it is parsed. "
        "Raise it with max_context_tokens for very long contexts (a token is a few bytes of JSON).",
    )
    exact_history: bool = Field(
        True,
        description="Feed a re-sent assistant message as the token ids this episode sampled for it (matched on "
        "its text; the template's ids otherwise), so the model sees what it produced and token-mode merging "
        "can fold the calls. False: always the template's ids.",
    )


class InferenceConfig(_Frozen):
    batch_invariant: bool = Field(
        False,
        description="Decode each request on its own instead of batching concurrent ones. Sampling follows "
        "each episode's seeded stream either way; batched forward passes still round a row's logits "
        "differently (~1e-6) with the rows beside it, which moves recorded logprobs and so the training "
        "metrics. On: every number repeats bit for bit on the same machine and thread count, at the cost of "
        "batching's throughput (docs/engine.md, reproducible runs). torch backend only. Turns the prefix "
        "cache off: what a cached prefix holds depends on which requests ran before.",
    )
    prefix_cache_mib: int = Field(
        0,
        ge=0,
        description="MiB of KV the torch backend keeps so later prompts that start with the same tokens (a "
        "group's shared prompt, an episode's re-sent history) skip prefilling them; least recently used "
        "prefixes are evicted past this budget, and all are dropped whenever the weights change. Outputs match "
        "the uncached path up to float rounding (the same as batching with other rows causes). SmolLM2-135M "
        "float32 holds ~45 KiB per token; 256 is a reasonable budget. 0 (default): off, every prompt is prefilled "
        "whole, and a request repeated alone gives bit-identical log-probs (with the cache, equal within "
        "rounding: its last prompt token runs in another matmul shape). Ignored with batch_invariant.",
    )


class CollabMethod(str, Enum):
    """How the servers of a collaboration group share rollouts (specs/hacpo.md, baselines)."""

    HACPO = "hacpo"  # cross samples with capability baseline, omega, exponential weight, stepwise clip
    NAIVE = "naive"  # cross samples treated as on-policy, joint plain mean/std
    GSPO = "gspo"  # own G samples only (no exchange), same loss code path
    GSPOX2 = "gspox2"  # own 2G samples only: as many rollouts per learner as HACPO trains on

    @property
    def exchanges(self) -> bool:
        return self in (CollabMethod.HACPO, CollabMethod.NAIVE)


class CollaborationConfig(_Frozen):
    """This server is one agent of a group of models that train together on one task (HACPO family).

    The trainer then runs the HACPO step (own samples GSPO-style, cross samples re-tokenised from text)
    instead of algorithm.policy_loss; the pool must wait for the client to say a step is complete (its
    cross samples imported), so pool.policy must be one of the agree policies.
    """

    agent: str = Field(..., min_length=1, max_length=64, description="This server's agent name (the `source` of its samples).")
    method: CollabMethod = Field(CollabMethod.HACPO, description="hacpo, naive (sharing), gspo or gspox2 (own samples only).")
    hacpo: HacpoConfig = Field(
        default_factory=HacpoConfig,
        description="HACPO's coefficients and ablation flags (alpha, delta, delta_step, eps, K, capability_baseline, ...).",
    )

    @model_validator(mode="before")
    @classmethod
    def _naive_flags(cls, data: Any) -> Any:
        # Naive sharing is HacpoConfig(naive_sharing=True): one code path, its flags implied there.
        if not isinstance(data, dict):
            return data
        method, hacpo = data.get("method", CollabMethod.HACPO), data.get("hacpo", {})
        hacpo = hacpo.model_dump(exclude_unset=True) if isinstance(hacpo, HacpoConfig) else dict(hacpo)
        if CollabMethod(method) is CollabMethod.NAIVE:
            return {**data, "hacpo": {**hacpo, "naive_sharing": True}}
        if hacpo.get("naive_sharing"):
            raise ConfigError(f"hacpo.naive_sharing is the 'naive' method; set method: naive instead of {method!r}")
        return data


class VllmConfig(_Frozen):
    """The vLLM rollout engine of `backend: vllm` (a `vllm serve` process on this host, driven token-in/
    token-out over loopback HTTP). Ignored by the other backends."""

    gpu_memory_utilization: float = Field(
        0.4,
        gt=0,
        lt=1,
        description="Share of each GPU vLLM may take (weights + KV cache). The torch trainer shares the GPU, "
        "so leave it room for weights, gradients and AdamW state (about 4x the weights in float32).",
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs vLLM shards the model over.")
    max_num_seqs: int = Field(256, ge=1, description="Most sequences vLLM decodes together (concurrent episodes).")
    startup_timeout_s: float = Field(900.0, gt=0, description="How long to wait for vLLM to load and warm up.")
    extra_args: list[str] = Field(
        default_factory=list, description="Extra `vllm serve` arguments, passed as they are (e.g. ['--enforce-eager'])."
    )


class VerlConfig(_Frozen):
    """The cluster shape of `backend: verl` (mapped into verl's trainer config). Ignored by the other backends."""

    nnodes: int = Field(1, ge=1, description="Nodes verl's FSDP actors and vLLM replicas spread over.")
    n_gpus_per_node: int = Field(1, ge=1, description="GPUs used on each node.")
    rollout_tensor_parallel_size: int = Field(1, ge=1, description="GPUs per vLLM replica (verl rollout TP).")
    gpu_memory_utilization: float = Field(0.5, gt=0, lt=1, description="vLLM's share of each GPU (colocated with FSDP).")
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join ('auto', or the head's host:port / ray:// address); None starts a "
        "one-node cluster in the server's process. `swarm serve --ray-address` sets it.",
    )


class SwarmConfig(_Frozen):
    """Everything a swarm server needs to host and train one model."""

    model: ModelConfig = ModelConfig()
    backend: Literal["torch", "vllm", "verl"] = Field(
        "torch",
        description="torch: one machine, CPU or one GPU. vllm: one CUDA host, vLLM rollouts + torch trainer. "
        "verl: Ray cluster, verl's FSDP actor + vLLM replicas (see docs/engine.md, GPU backends).",
    )
    vllm: VllmConfig = VllmConfig()
    verl: VerlConfig = VerlConfig()
    lora: LoraConfig = LoraConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    pool: PoolConfig = PoolConfig()
    training: TrainingConfig = TrainingConfig()
    episodes: EpisodeConfig = EpisodeConfig()
    inference: InferenceConfig = InferenceConfig()
    collaboration: CollaborationConfig | None = Field(
        None, description="Set when this server is one agent of a HACPO-style group (see CollaborationConfig)."
    )
    run_dir: str | None = Field(None, description="Checkpoints and metrics.jsonl go here; a restart with the same dir resumes.")

    @model_validator(mode="after")
    def _check(self) -> SwarmConfig:
        t = self.training
        if t.micro_batch_size > t.mini_batch_size:
            raise ConfigError(
                f"training.micro_batch_size ({t.micro_batch_size}) exceeds mini_batch_size ({t.mini_batch_size}); "
                "a micro-batch is a slice of a mini-batch, so lower micro_batch_size."
            )
        if self.collaboration is not None and self.pool.policy not in ("all_clients_agree", "any_client_agrees"):
            raise ConfigError(
                f"collaboration needs the client to trigger each step once the shared samples are in; "
                f"pool.policy={self.pool.policy!r} would train before. Set pool.policy to 'any_client_agrees'."
            )
        if t.strip_reasoning and t.merge != "text":
            raise ConfigError(
                f"training.strip_reasoning only changes text merging, but training.merge is {t.merge!r}; "
                "set merge: text, or drop strip_reasoning."
            )
        if self.inference.batch_invariant and self.backend != "torch":
            raise ConfigError(
                f"inference.batch_invariant decodes each request alone in the torch backend; backend "
                f"{self.backend!r} batches in its own engine. Set backend: torch, or batch_invariant: false."
            )
        if self.backend == "verl" and self.collaboration is not None:
            raise ConfigError(
                "collaboration (HACPO) is not available with backend: verl: its loss needs per-sample source "
                "log-probs that verl's policy-loss signature cannot carry. Use backend: torch or vllm."
            )
        from engine.algorithms import advantage_names, policy_loss_defaults, policy_loss_names

        a = self.algorithm
        if a.advantage not in advantage_names():
            raise ConfigError(f"algorithm.advantage {a.advantage!r} is not registered; valid: {', '.join(advantage_names())}")
        if a.policy_loss not in policy_loss_names():
            raise ConfigError(f"algorithm.policy_loss {a.policy_loss!r} is not registered; valid: {', '.join(policy_loss_names())}")
        recommended = policy_loss_defaults(a.policy_loss).get("clip_low")
        if recommended is not None and a.clip_low > 30 * recommended:
            raise ConfigError(
                f"policy_loss {a.policy_loss!r} expects clip_low near {recommended} (its ratios stay close to 1); "
                f"clip_low={a.clip_low} would never clip. Set algorithm.clip_low/clip_high to the loss's defaults."
            )
        return self

    @classmethod
    def from_yaml(cls, path: str | Path) -> SwarmConfig:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read config {path}: {e}") from e
        return cls.model_validate(data)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
