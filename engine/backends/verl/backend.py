"""`backend: verl`: the swarm server (HTTP surface, episodes, tracking, merging, pool) trains through verl on
a Ray cluster: verl's FSDP actor takes each pooled batch as a DataProto, verl's vLLM replicas serve the
calls token-in/token-out, and verl's weight sync and checkpoint manager do the rest.

verl 0.9.1 APIs this drives from outside its trainer (read in verl 0.9.1's source; `RayPPOTrainer.
init_workers` and `verl.trainer.ppo.v1.trainer_base` compose the same pieces the same way):

- Workers. `verl.workers.engine_workers.ActorRolloutRefWorker(config=actor_rollout_ref, role=...)` is the
  hybrid worker: the FSDP actor (a `TrainingWorker` over verl's model engine), the vLLM rollout and, for
  role `actor_rollout_ref`, a frozen reference copy, in one process per GPU. (0.9 has no `fsdp_workers`
  module any more: the "legacy" workers are gone.) It is wrapped as verl does: `ray.remote(cls)` ->
  `RayClassWithInitArgs` -> `create_colocated_worker_cls` -> `RayWorkerGroup(resource_pool, ..., device_name)`
  -> `.spawn(prefix_set={role})[role]`, on the placement groups of `ResourcePoolManager({"global_pool":
  [gpus] * nodes}).create_resource_pool()`; then `init_model()` on every worker.
- Updates. `wg.update_actor(td)` takes a `TensorDict`, not a DataProto: verl's own trainer converts with
  `DataProto.to_tensordict()` and `verl.workers.utils.padding.left_right_2_no_padding` (nested tensors, no
  padding) and attaches non-tensor entries (`mini_batch_size`, `global_batch_size`, `epochs`, `temperature`,
  ...; see `plan.update_meta`). The worker splits the batch evenly over data-parallel ranks, cuts
  mini-batches (one optimizer step each) and micro-batches, calls verl's `ppo_loss`, which calls the
  registered policy loss (`actor.policy_loss.loss_mode`: our `swarm_*`), and returns the metrics. Reference
  log-probs: `compute_ref_log_prob` (role `actor_rollout_ref`) or, with LoRA, `compute_log_prob` with
  `no_lora_adapter`; both return nested log-probs, padded back with `no_padding_2_padding`.
- Rollout replicas. `verl.workers.rollout.llm_server.LLMServerManager.create(config, worker_group,
  rollout_resource_pool)` starts one vLLM replica per `rollout.tensor_model_parallel_size` workers, each a
  real vLLM OpenAI HTTP server in the worker's node (`server_addresses`, "host:port"), serving the model
  under its local path. This backend drives them with `VllmInference` (token-in/token-out, raw logprobs)
  through a `ReplicaRouter`.
- Weight sync. `verl.checkpoint_engine.CheckpointEngineManager(config, actor_wg, replicas)` with the
  "naive" backend (colocated actor and rollout): `sleep_replicas()` frees the replicas' GPU memory before
  the actor trains, `update_weights(global_steps)` makes the worker resume the vLLM weights, push the
  actor's (LoRA merged in: `model.lora.merge`, see `config`) and resume the KV cache. verl's trainer calls
  it once at start (replicas load with dummy weights) and after each actor update.
- Checkpoints. `wg.save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)` and
  `wg.load_checkpoint(local_path, del_local_after_load)`: verl's checkpoint manager writes each rank's FSDP
  model, optimizer, LR-scheduler and RNG state under `<run_dir>/verl/global_step_<n>/actor`. The swarm
  checkpoint pointer (`engine.training.checkpoint`, atomic) is written after it and names it, so resume
  takes the newest complete pair; the pool journal replays what the checkpoint had not yet trained.
- Registration in every worker: `actor_rollout_ref.model.external_lib` (verl imports it in each worker),
  the package's `verl.plugins` entry point, and the Ray job's `worker_process_setup_hook` (`plan`).

CPU: none of the above runs without an accelerator. verl 0.9.1 has no CPU platform (`verl.plugin.platform`
knows CUDA, NPU and ROCm and falls back to CUDA), its FSDP engine is registered for devices `cuda` and
`npu` only (`EngineRegistry`), and the rollout is vLLM on GPUs. What is tested on CPU is everything around
those calls: the config translation, the batch -> DataProto -> TensorDict conversion verl's worker
receives (through verl's own conversion and verl's own `ppo_loss` with the registered swarm losses), the
mini-batch/padding plan, the step state machine, metrics mapping, checkpoint placement, the replica
router, and the boot checks. The GPU path (this class past its checks) has not been run: see
docs/engine.md, "GPU backends".
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from engine.backends.base import GPU_INSTALL
from engine.backends.verl.plan import (
    Phase,
    StepMachine,
    checkpoint_due,
    gpu_shortfall,
    preflight,
    ray_init_kwargs,
    served_model_name,
    stale_verl_dirs,
    swarm_metrics,
    verl_step_dir,
    worker_plan,
)
from engine.backends.verl.update import UpdateBatch, step_samples, update_batches
from engine.config import SwarmConfig
from engine.errors import ConfigError
from engine.training.checkpoint import checkpoints_dir, commit_checkpoint, latest_checkpoint, read_state
from engine.training.metrics import MetricsLog, reward_by_client
from engine.types import EpisodeResult

log = logging.getLogger("swarm.backend.verl")

__all__ = [
    "VerlBackend",
    "publish_checkpoint",
    "reference_input",
    "reference_log_probs",
    "resume_point",
    "update_input",
]


def resume_point(cfg: SwarmConfig) -> tuple[int, Path | None]:
    """(global step, verl step dir) of the newest complete checkpoint in the run dir, (0, None) without one.

    Raises ConfigError for a checkpoint another backend wrote (its weights are a Hugging Face directory,
    not verl's sharded FSDP state) or one whose verl directory is gone.
    """
    ckpt = latest_checkpoint(cfg.run_dir)
    if ckpt is None:
        return 0, None
    state = read_state(ckpt)
    if state.get("backend") != "verl" or not state.get("verl_dir"):
        raise ConfigError(
            f"{ckpt} was written by backend {state.get('backend', 'torch')!r}; backend 'verl' resumes only its own "
            "checkpoints (verl's sharded FSDP state). Use a new run dir, or the backend that wrote it"
        )
    verl_dir = Path(state["verl_dir"])
    if not cfg.verl.ray_address and not (verl_dir / "actor").is_dir():
        # (On a cluster the shards may live on other nodes' disks; verl's load reports what is missing.)
        raise ConfigError(f"{ckpt} names verl checkpoint {verl_dir / 'actor'}, which does not exist")
    return int(state["global_step"]), verl_dir


def publish_checkpoint(cfg: SwarmConfig, step: int) -> Path:
    """Make verl's checkpoint of `step` (already written under `verl_step_dir`) the run's newest complete
    one: the swarm pointer names it (atomically, `commit_checkpoint`), then verl directories no kept
    pointer names are removed. Returns the swarm checkpoint directory."""
    verl_dir = verl_step_dir(cfg.run_dir, step)
    ckpt = commit_checkpoint(
        cfg.run_dir,
        step,
        lambda tmp: None,  # the state is verl's, under verl_dir; the pointer is what makes it complete
        {"backend": "verl", "verl_dir": str(verl_dir), "model": cfg.model.name, "lora": cfg.lora.enabled},
    )
    root = Path(cfg.run_dir) / "verl"
    kept = [int(p.name.split("-")[1]) for p in checkpoints_dir(cfg.run_dir).glob("step-*") if p.is_dir()]
    for name in stale_verl_dirs(os.listdir(root) if root.is_dir() else [], kept):
        shutil.rmtree(root / name, ignore_errors=True)
    return ckpt


def _dataproto(ub: UpdateBatch) -> Any:
    from verl import DataProto

    data = DataProto.from_dict(tensors=ub.tensors, non_tensors=ub.non_tensors, meta_info=dict(ub.meta))
    if ub.ref_log_prob is not None:
        data.batch["ref_log_prob"] = ub.ref_log_prob
    return data


def update_input(ub: UpdateBatch) -> Any:
    """What `update_actor` takes for `ub`: its DataProto (with the reference log-probs when the KL loss is
    on) as verl's trainer converts it, a TensorDict without padding carrying `ub.meta`."""
    from verl.workers.utils.padding import left_right_2_no_padding

    return left_right_2_no_padding(_dataproto(ub).to_tensordict())


def reference_input(ub: UpdateBatch, *, adapter: bool) -> Any:
    """What `compute_ref_log_prob` (or, for LoRA, `compute_log_prob` with the adapter off) takes for `ub`."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    td = left_right_2_no_padding(_dataproto(ub).to_tensordict())
    tu.assign_non_tensor(td, calculate_entropy=False, compute_loss=False)
    if adapter:
        tu.assign_non_tensor(td, no_lora_adapter=True)
    return td


def reference_log_probs(out: Any, td: Any) -> Any:
    """The (B, R) reference log-probs from a log-prob call's output on `td` (verl returns them unpadded)."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding

    return no_padding_2_padding(tu.get(out, "log_probs"), td).float()


def _load_tokenizer(model_dir: Path) -> tuple[Any, list[int], int | None]:
    """The model's tokenizer (with a pad token), its end-of-turn ids and its vocabulary size, without
    loading weights on the server (the weights live in the Ray workers)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from engine.models.tokens import end_of_turn_ids, ensure_pad_token

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    ensure_pad_token(tokenizer)
    try:
        gen = GenerationConfig.from_pretrained(model_dir, local_files_only=True)
    except OSError:
        gen = None
    vocab = getattr(AutoConfig.from_pretrained(model_dir, local_files_only=True), "vocab_size", None)
    return tokenizer, end_of_turn_ids(tokenizer, gen), vocab


class VerlBackend:
    """verl's FSDP actor and vLLM replicas on Ray behind the swarm `Backend` protocol (module docstring)."""

    def __init__(self, cfg: SwarmConfig) -> None:
        try:
            import verl  # noqa: F401
        except ImportError as e:
            raise ConfigError(
                f"backend 'verl' needs verl ({e}); on a CUDA machine run `{GPU_INSTALL}`"
            ) from e
        import torch

        from engine.backends.verl.config import compose_verl_config
        from engine.models.loader import resolve_model_dir

        self.cfg = cfg
        self.model_dir = resolve_model_dir(cfg.model.name, seed=cfg.model.seed)
        # Configuration mistakes are reported first (the translation's and verl's own checks), then what
        # this process lacks, before Ray starts anything.
        self.verl_config = compose_verl_config(cfg, model_path=str(self.model_dir))
        from omegaconf import OmegaConf

        # As verl's launcher does: the workers get plain values, not interpolations.
        OmegaConf.resolve(self.verl_config)
        problem = preflight(
            cfg,
            has_vllm=importlib.util.find_spec("vllm") is not None,
            has_cuda=torch.cuda.is_available(),
            has_flash_attn=importlib.util.find_spec("flash_attn") is not None,
        )
        if problem:
            raise ConfigError(problem)
        step, resume_dir = resume_point(cfg)
        self.tokenizer, eot, vocab = _load_tokenizer(self.model_dir)
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.plan = worker_plan(cfg)
        self.machine = StepMachine(step, phase=Phase.ASLEEP)
        self.metrics = MetricsLog(cfg.run_dir)
        self.inference: Any = None
        self._saved_step: int | None = None
        self._save_error: Exception | None = None
        self._started_ray = False
        self.wg: Any = None
        self.servers: Any = None

        import ray

        self._ray = ray
        try:
            self._join_cluster()
            self._start_workers(resume_dir)
            self.sync_mgr.update_weights(step)  # the replicas start on dummy weights: load the actor's
            self.machine.to(Phase.SERVING)
            self.inference = self._make_router(eot, vocab)
        except BaseException:
            self._release_cluster()
            raise
        if resume_dir is not None:
            log.info("resumed from %s at step %d", resume_dir, step)
        dropped = self.metrics.supersede_after(step)
        if dropped:
            log.info("superseded %d metrics records after step %d", dropped, step)

    # -- boot ----------------------------------------------------------------------------------------

    def _join_cluster(self) -> None:
        ray, cfg = self._ray, self.cfg
        if not ray.is_initialized():
            where = (
                f"join the Ray cluster at {cfg.verl.ray_address!r}"
                if cfg.verl.ray_address
                else "start Ray here"
            )
            try:
                ray.init(**ray_init_kwargs(cfg, os.environ))
            except Exception as e:  # noqa: BLE001 - whatever Ray raises, the user needs the address and the fix
                raise ConfigError(
                    f"backend 'verl' could not {where}: {type(e).__name__}: {e}. Start the head with "
                    "`ray start --head` on the cluster and pass its address with --ray-address (or 'auto' on "
                    "a cluster node), or leave --ray-address out to start a one-node cluster here"
                ) from e
            self._started_ray = True
        problem = gpu_shortfall(cfg, float(ray.available_resources().get("GPU", 0.0)))
        if problem:
            raise ConfigError(problem)

    def _start_workers(self, resume_dir: Path | None) -> None:
        from verl.checkpoint_engine import CheckpointEngineManager
        from verl.single_controller.ray import (
            RayClassWithInitArgs,
            RayWorkerGroup,
            ResourcePoolManager,
            create_colocated_worker_cls,
        )
        from verl.trainer.ppo.utils import Role
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.engine_workers import ActorRolloutRefWorker
        from verl.workers.rollout.llm_server import LLMServerManager

        vc, plan, ray = self.verl_config, self.plan, self._ray
        role = Role.ActorRolloutRef if plan.role == "actor_rollout_ref" else Role.ActorRollout
        pools = ResourcePoolManager(
            resource_pool_spec={"global_pool": list(plan.process_on_nodes)}, mapping={role: "global_pool"}
        )
        pools.create_resource_pool()
        self._pool = pools.get_resource_pool(role)
        worker = RayClassWithInitArgs(
            cls=ray.remote(ActorRolloutRefWorker), config=vc.actor_rollout_ref, role=plan.role
        )
        group = RayWorkerGroup(
            resource_pool=self._pool,
            ray_cls_with_init=create_colocated_worker_cls(class_dict={plan.role: worker}),
            device_name=vc.trainer.device,
        )
        self.wg = group.spawn(prefix_set={plan.role})[plan.role]
        self.wg.init_model()
        self.servers = LLMServerManager.create(
            config=vc, worker_group=self.wg, rollout_resource_pool=self._pool
        )
        sync_cfg = omega_conf_to_dataclass(vc.actor_rollout_ref.rollout.checkpoint_engine)
        sync_cfg.backend = "naive"  # actor and rollout share the processes (verl's v1 trainer does the same)
        self.sync_mgr = CheckpointEngineManager(
            config=sync_cfg, actor_wg=self.wg, replicas=self.servers.get_replicas()
        )
        self.sync_mgr.sleep_replicas()
        if resume_dir is not None:
            self.wg.load_checkpoint(str(resume_dir / "actor"), del_local_after_load=False)

    def _make_router(self, eot: list[int], vocab: int | None):
        import httpx

        from engine.backends.verl.router import ReplicaRouter
        from engine.backends.vllm.inference import VllmInference

        engines = []
        for address in self.servers.server_addresses:
            url = f"http://{address}"
            r = httpx.get(url + "/v1/models", timeout=60)
            r.raise_for_status()
            engines.append(
                VllmInference(
                    url,
                    served_model_name(r.json(), fallback=str(self.model_dir)),
                    stop_token_ids=eot,
                    max_model_len=self.cfg.episodes.max_context_tokens,
                    vocab_size=vocab,
                )
            )
        return ReplicaRouter(engines)

    # -- Backend protocol ----------------------------------------------------------------------------

    @property
    def global_step(self) -> int:
        return self.machine.global_step

    def train_step(self, batch: list[EpisodeResult]) -> dict[str, float]:
        """One step: the replicas sleep, the actor takes the batch (one `update_actor` call per optimizer
        step), a due checkpoint is saved while the replicas still sleep, and the new weights are synced to
        them. The server has paused inference (no call in flight) before this runs."""
        t0 = time.perf_counter()
        self.machine.require_serving()
        cfg = self.cfg
        samples = step_samples(batch, cfg)
        calls = update_batches(samples, cfg, self.pad_id, self.plan.dp_size)
        self.machine.to(Phase.ASLEEP)
        reports: list[dict[str, float]] = []
        t_update = time.perf_counter()
        try:
            self.sync_mgr.sleep_replicas()
            for _ in range(cfg.training.ppo_epochs):
                reports.extend(self._update(ub) for ub in calls)
        except BaseException as e:
            self._resync_after_failure(e)
            raise
        update_s = time.perf_counter() - t_update
        self.machine.to(Phase.UPDATED)
        step = self.machine.global_step
        if checkpoint_due(cfg, step):
            try:  # while the replicas sleep: the actor has the GPU memory to gather its state
                self._save_verl(step)
                self._saved_step = step
            except Exception as e:  # noqa: BLE001 - reported by checkpoint(), after the weights are synced
                log.error("verl checkpoint of step %d failed: %s: %s", step, type(e).__name__, e)
                self._save_error = e
        t_sync = time.perf_counter()
        try:
            self.sync_mgr.update_weights(step)
        except BaseException as e:
            self._break("the weight sync to the vLLM replicas", e)
            raise
        self.machine.to(Phase.SERVING)
        rewards = [e.reward for e in batch]
        mean = sum(rewards) / len(rewards)
        out = swarm_metrics(reports)
        out.update(reward_by_client(batch))
        out.update(
            step=float(step),
            reward_mean=mean,
            reward_std=(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1)) ** 0.5
            if len(rewards) > 1
            else 0.0,
            episodes=float(len(batch)),
            samples=float(len(samples)),
            tokens=float(sum(ub.n_tokens for ub in calls) * cfg.training.ppo_epochs),
            train_update_s=update_s,
            weight_sync_s=time.perf_counter() - t_sync,
            train_time_s=time.perf_counter() - t0,
        )
        self.metrics.write(out)
        return out

    def checkpoint(self) -> bool:
        """Publish the verl checkpoint `train_step` saved for this step (the swarm pointer names it); raise
        the error of a save that failed, as the torch backend's checkpoint() would."""
        if self._save_error is not None:
            error, self._save_error = self._save_error, None
            raise RuntimeError(f"verl checkpoint of step {self.global_step} failed: {error}") from error
        step = self.global_step
        if self._saved_step != step or self.cfg.run_dir is None:
            return False
        publish_checkpoint(self.cfg, step)
        return True

    def close(self) -> None:
        try:
            if self.inference is not None:
                self.inference.close()
        finally:
            self._release_cluster()

    # -- internals -----------------------------------------------------------------------------------

    def _update(self, ub: UpdateBatch) -> dict[str, float]:
        from verl.utils import tensordict_utils as tu
        from verl.utils.metric import reduce_metrics

        if self.plan.ref != "none" and ub.ref_log_prob is None:
            # Once per step: the reference policy does not change across epochs.
            td = reference_input(ub, adapter=self.plan.ref == "adapter")
            out = (
                self.wg.compute_log_prob(td)
                if self.plan.ref == "adapter"
                else self.wg.compute_ref_log_prob(td)
            )
            ub.ref_log_prob = reference_log_probs(out, td)
        out = self.wg.update_actor(update_input(ub))
        return reduce_metrics(dict(tu.get(out, "metrics")))

    def _save_verl(self, step: int) -> None:
        path = verl_step_dir(self.cfg.run_dir, step) / "actor"
        self.wg.save_checkpoint(str(path), None, step, max_ckpt_to_keep=2)

    def _resync_after_failure(self, error: BaseException) -> None:
        """After a failed sleep or update: bring the replicas back with whatever weights the actor holds now
        (a failed update may have applied some of its optimizer steps), or give up for good."""
        log.error("verl actor update failed (%s: %s); syncing the replicas back", type(error).__name__, error)
        try:
            self.sync_mgr.update_weights(self.machine.global_step)
        except BaseException as e:  # noqa: BLE001
            self._break("the weight sync after a failed update", e)
            return
        self.machine.to(Phase.SERVING)

    def _break(self, during: str, error: BaseException) -> None:
        reason = self.machine.break_(during, error)
        log.error("verl backend broken: %s", reason)
        if self.inference is not None:
            self.inference.mark_broken(
                f"backend 'verl' cannot serve: {reason}; restart the server on the same run dir to resume"
            )

    def _release_cluster(self) -> None:
        """Stop what this backend started on Ray: the whole Ray session when it started it (its worker
        group, replicas and placement groups are this job's), else its own actors and placement groups."""
        ray = self._ray if hasattr(self, "_ray") else None
        if ray is None or not ray.is_initialized():
            return
        if self._started_ray:
            ray.shutdown()
            return
        for handle in list(getattr(self.wg, "workers", None) or []):
            ray.kill(handle)
        for replica in list(getattr(self.servers, "rollout_replicas", None) or []):
            for handle in list(getattr(replica, "servers", None) or []):
                ray.kill(handle)
        from ray.util.placement_group import remove_placement_group

        for pg in list(getattr(getattr(self, "_pool", None), "pgs", None) or []):
            remove_placement_group(pg)
