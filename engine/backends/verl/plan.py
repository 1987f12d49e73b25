"""The verl backend's decisions, as pure functions of the SwarmConfig and of what verl hands back (no verl,
Ray or vLLM import here, so all of it is tested on CPU in any venv).

- `ray_init_kwargs`: how the server process starts or joins the Ray cluster (`verl.ray_address`), with the
  environment verl's own launcher gives its workers and a worker setup hook that registers the swarm
  losses in every Ray worker process (besides `actor_rollout_ref.model.external_lib`, see `register`).
- `worker_plan`: the one worker group this backend runs (verl's hybrid `ActorRolloutRefWorker`: FSDP actor
  and vLLM rollout in the same processes, one per GPU), where the reference policy lives when the KL loss
  is on, and how many vLLM replicas that makes.
- `mini_batches` / `update_meta`: how a pooled batch is cut into verl `update_actor` calls. The driver cuts
  the mini-batches itself, exactly as the torch trainer does (same order, same sizes), so each call is one
  optimizer step; each one is padded with empty rows (no trainable token, weight 0) to a whole number of
  micro-batches on every data-parallel rank, because verl splits a batch evenly over ranks and asserts
  whole micro-batches. `global_batch_size` is the number of rows that carry a loss, so verl's global
  normalisation (and the swarm loss adapters, which read it) ignore the padding.
- `swarm_metrics`: verl's reduced actor metrics under the project's names.
- `StepMachine`: where a training step stands between the rollout replicas and the actor, so a step that
  failed half-way is never followed by serving stale or half-synced weights without saying so.
- `checkpoint_due`, `verl_step_dir`, `stale_verl_dirs`: checkpoint placement (verl's checkpoint manager
  writes the weights, optimizer and scheduler state; the swarm checkpoint pointer says which one is
  complete).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.backends.base import GPU_INSTALL
from engine.config import SwarmConfig

__all__ = [
    "RAY_SETUP_HOOK",
    "MiniBatch",
    "Phase",
    "StepMachine",
    "WorkerPlan",
    "checkpoint_due",
    "gpu_shortfall",
    "mini_batches",
    "preflight",
    "ray_init_kwargs",
    "served_model_name",
    "stale_verl_dirs",
    "swarm_metrics",
    "update_meta",
    "verl_step_dir",
    "worker_plan",
]

# A `module.function` string: Ray imports and calls it once in every worker process it starts for this job.
RAY_SETUP_HOOK = "engine.backends.verl.register.register_with_verl"

# What verl's own launcher (verl.trainer.constants_ppo.PPO_RAY_RUNTIME_ENV) sets for its workers and that
# matters here; a variable already set in the server's environment is left to the inherited value.
_WORKER_ENV = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "VLLM_DISABLE_COMPILE_CACHE": "1",
}


def ray_init_kwargs(cfg: SwarmConfig, environ: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments of `ray.init` for `cfg`: join `verl.ray_address` when set, else start a one-node
    cluster inside this process (Ray's default with no address)."""
    env_vars = {k: v for k, v in _WORKER_ENV.items() if k not in environ}
    kwargs: dict[str, Any] = {
        "runtime_env": {"env_vars": env_vars, "worker_process_setup_hook": RAY_SETUP_HOOK},
        "include_dashboard": False,
        "log_to_driver": True,
    }
    if cfg.verl.ray_address:
        kwargs["address"] = cfg.verl.ray_address
    return kwargs


def preflight(cfg: SwarmConfig, *, has_vllm: bool, has_cuda: bool, has_flash_attn: bool) -> str | None:
    """What this process lacks to drive verl (a message naming the fix), checked before Ray starts; None
    when nothing. The driver needs vLLM importable (verl builds its rollout replica classes there); it
    needs a GPU, and FlashAttention-2 for verl's FSDP actor (verl's default attention for its unpadded
    batches), only when it starts the cluster itself (no `verl.ray_address`): on a joined cluster those
    are the GPU nodes' business."""
    if not has_vllm:
        return (
            "backend 'verl' serves rollouts from verl's vLLM replicas, and vLLM is not installed here; on a CUDA "
            f"machine run `{GPU_INSTALL}` (on every node of the Ray cluster), or use backend: torch"
        )
    if cfg.verl.ray_address:
        return None
    if not has_cuda:
        return (
            "backend 'verl' needs CUDA GPUs and this machine has none (torch.cuda.is_available() is False); "
            "join a GPU Ray cluster with --ray-address (verl.ray_address), or use backend: torch here"
        )
    if not has_flash_attn:
        return (
            "backend 'verl' trains with verl's FSDP actor, which runs FlashAttention-2 on unpadded batches, and "
            "flash_attn is not installed here; run `pip install flash-attn --no-build-isolation` (the build "
            "matching this torch), or use backend: vllm on one GPU"
        )
    return None


def gpu_shortfall(cfg: SwarmConfig, available_gpus: float) -> str | None:
    """Why the cluster cannot host `cfg` (a message naming what to change), or None when it can."""
    v = cfg.verl
    need = v.nnodes * v.n_gpus_per_node
    if available_gpus >= need:
        return None
    where = (
        f"the Ray cluster at {v.ray_address}" if v.ray_address else "the one-node Ray cluster started here"
    )
    return (
        f"backend 'verl' needs {need} GPUs (verl.nnodes {v.nnodes} x verl.n_gpus_per_node {v.n_gpus_per_node}) "
        f"and {where} has {available_gpus:g} free; lower verl.n_gpus_per_node / verl.nnodes, or join a "
        "larger cluster with --ray-address"
    )


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """The worker group of the backend.

    role: verl's role string for `ActorRolloutRefWorker` (`actor_rollout`, or `actor_rollout_ref` when a
        separate frozen reference model is built in the same processes).
    ref: where reference log-probs come from: "none" (no KL loss), "adapter" (LoRA: the actor with its
        adapter disabled, verl's `no_lora_adapter`), "model" (full weights: the `ref` copy).
    process_on_nodes: GPUs (= worker processes) per node, verl's resource-pool spec.
    dp_size: data-parallel ranks of the FSDP actor (every process).
    n_replicas: vLLM replicas (one HTTP server each), dp_size / rollout tensor parallel size.
    """

    role: str
    ref: str
    process_on_nodes: tuple[int, ...]
    dp_size: int
    n_replicas: int


def worker_plan(cfg: SwarmConfig) -> WorkerPlan:
    v = cfg.verl
    kl = cfg.algorithm.kl_coef > 0
    ref = "none" if not kl else ("adapter" if cfg.lora.enabled else "model")
    dp = v.nnodes * v.n_gpus_per_node
    return WorkerPlan(
        role="actor_rollout_ref" if ref == "model" else "actor_rollout",
        ref=ref,
        process_on_nodes=(v.n_gpus_per_node,) * v.nnodes,
        dp_size=dp,
        n_replicas=dp // v.rollout_tensor_parallel_size,
    )


@dataclass(frozen=True, slots=True)
class MiniBatch:
    """One `update_actor` call: samples `rows` of the step's ordered samples, then `n_pad` empty rows, split
    over the ranks in micro-batches of `micro` rows."""

    rows: slice
    n_pad: int
    micro: int

    @property
    def size(self) -> int:
        return self.rows.stop - self.rows.start + self.n_pad


def mini_batches(
    n_samples: int, mini_batch_size: int, dp_size: int, micro_batch_size: int
) -> list[MiniBatch]:
    """The step's optimizer steps: consecutive runs of `mini_batch_size` samples (the last may be shorter),
    as `engine.training.batch.chunks` cuts them for the torch trainer, each padded to a whole number of
    micro-batches per rank. The micro-batch shrinks for a mini-batch smaller than `micro_batch_size` per
    rank, so padding stays below one micro-batch per rank."""
    if n_samples < 1:
        raise ValueError("a training step needs at least one sample")
    if min(mini_batch_size, dp_size, micro_batch_size) < 1:
        raise ValueError("mini_batch_size, dp_size and micro_batch_size must be >= 1")
    out = []
    for start in range(0, n_samples, mini_batch_size):
        stop = min(start + mini_batch_size, n_samples)
        per_rank = math.ceil((stop - start) / dp_size)
        micro = min(micro_batch_size, per_rank)
        padded = math.ceil(per_rank / micro) * micro * dp_size
        out.append(MiniBatch(slice(start, stop), padded - (stop - start), micro))
    return out


def update_meta(cfg: SwarmConfig, mb: MiniBatch, n_loss_rows: int) -> dict[str, Any]:
    """The non-tensor entries verl's `update_actor` reads (as its own trainer sets them in `_update_actor`),
    for one mini-batch that `n_loss_rows` of its rows carry a loss in.

    temperature 1: the recorded old log-probs are untempered (vLLM `raw_logprobs`), so the actor's must be.
    """
    return {
        "temperature": 1.0,
        "calculate_entropy": cfg.algorithm.entropy_coef != 0.0,
        "distillation_use_topk": False,
        "distillation_only": False,
        "global_batch_size": max(1, n_loss_rows),
        "mini_batch_size": mb.size,
        "micro_batch_size_per_gpu": mb.micro,
        "epochs": 1,
        "seed": cfg.model.seed,
        "dataloader_kwargs": {"shuffle": False},
        "compute_loss": True,
    }


def served_model_name(models: Mapping[str, Any], fallback: str) -> str:
    """The model name a vLLM server's `/v1/models` answer lists first (verl serves the model's local path);
    `fallback` when it lists none."""
    data = models.get("data") or []
    for entry in data:
        if isinstance(entry, Mapping) and entry.get("id"):
            return str(entry["id"])
    return fallback


_SWARM_PREFIX = "actor/swarm_"  # what the loss adapters in `register` name the project's loss metrics


def swarm_metrics(steps: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """One step's metrics from the reduced verl metrics of each `update_actor` call (one per optimizer step).

    The project's loss metrics (`actor/swarm_<name>`) come back as `<name>`, as the torch trainer reports
    them; `grad_norm` keeps its name; everything else verl reports is kept as `verl/<name>`. Each key is the
    mean over the calls that reported it (the torch trainer averages the same way), and `optimizer_steps`
    counts the calls.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    n = 0
    for m in steps:
        n += 1
        for key, value in m.items():
            if key.startswith(_SWARM_PREFIX):
                name = key[len(_SWARM_PREFIX) :]
            elif key == "grad_norm":
                name = key
            else:
                name = "verl/" + key
            try:
                x = float(value)
            except (TypeError, ValueError):
                continue  # verl reports the odd non-number (e.g. a list it did not reduce): not a metric here
            sums[name] = sums.get(name, 0.0) + x
            counts[name] = counts.get(name, 0) + 1
    out = {k: sums[k] / counts[k] for k in sums}
    out["optimizer_steps"] = float(n)
    return out


class Phase(enum.Enum):
    """Where the weights are between the actor and the vLLM replicas."""

    SERVING = "serving"  # replicas awake, serving the actor's current weights
    ASLEEP = (
        "asleep"  # replicas asleep (GPU memory given to the actor), still holding the weights before the step
    )
    UPDATED = "updated"  # the actor stepped; the replicas still hold (asleep) the weights before the step
    BROKEN = "broken"  # the replicas could not be brought back: only a restart serves again


_NEXT = {
    Phase.SERVING: {Phase.ASLEEP},
    Phase.ASLEEP: {Phase.UPDATED, Phase.SERVING},  # SERVING: re-synced after a failed update
    Phase.UPDATED: {Phase.SERVING},
    Phase.BROKEN: set(),
}


class StepMachine:
    """The step state machine of the verl backend (pure; the backend calls it around each verl call).

    SERVING -sleep-> ASLEEP -update-> UPDATED -sync-> SERVING, one optimizer update counted per UPDATED;
    ASLEEP -sync-> SERVING when the update failed (the replicas serve the actor's weights again, whatever
    the failed update left in them); any phase -> BROKEN when the replicas could not be synced or woken.
    """

    def __init__(self, global_step: int = 0, phase: Phase = Phase.SERVING) -> None:
        self.phase = (
            phase  # ASLEEP at boot: verl starts the replicas and puts them to sleep before the first sync
        )
        self.global_step = global_step
        self.reason: str | None = None

    def require_serving(self) -> None:
        """Raise, saying why and what to do, unless a new step may start."""
        if self.phase is Phase.BROKEN:
            raise RuntimeError(
                f"verl backend is broken: {self.reason}. The vLLM replicas do not hold the actor's weights; "
                "stop the server and start it again on the same run dir (it resumes from the last checkpoint)"
            )
        if self.phase is not Phase.SERVING:
            raise RuntimeError(f"a verl training step is already under way (phase {self.phase.value})")

    def to(self, phase: Phase) -> None:
        if phase not in _NEXT[self.phase]:
            raise RuntimeError(f"verl step: illegal transition {self.phase.value} -> {phase.value}")
        if phase is Phase.UPDATED:
            self.global_step += 1
        self.phase = phase

    def break_(self, during: str, error: BaseException) -> str:
        """Enter BROKEN for good; returns the reason (also kept in `reason`)."""
        self.reason = f"{during} failed at step {self.global_step} ({type(error).__name__}: {error})"
        self.phase = Phase.BROKEN
        return self.reason


def checkpoint_due(cfg: SwarmConfig, global_step: int) -> bool:
    """Whether the step just finished is to be checkpointed (the torch backend's rule)."""
    every = cfg.training.checkpoint_every
    return cfg.run_dir is not None and every > 0 and global_step % every == 0


def verl_step_dir(run_dir: str | Path, global_step: int) -> Path:
    """Where verl's checkpoint manager writes step `global_step` (its own `global_step_<n>` layout, under
    the `trainer.default_local_dir` the config translation sets); the actor's state is in `actor/`."""
    return Path(run_dir) / "verl" / f"global_step_{global_step}"


_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def stale_verl_dirs(names: Iterable[str], keep_steps: Iterable[int]) -> list[str]:
    """The `global_step_<n>` directory names among `names` that no kept swarm checkpoint points to."""
    keep = set(keep_steps)
    out = []
    for name in names:
        m = _STEP_DIR.match(name)
        if m and int(m.group(1)) not in keep:
            out.append(name)
    return sorted(out)
