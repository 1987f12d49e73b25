"""Booting `backend: verl` where verl is installed: what this (CPU) machine gets told, and the part of the
cluster set-up that runs without a GPU (a real one-node Ray cluster whose workers register the swarm
losses through the job's setup hook). Needs verl: `make test` runs it in the verl venv; skipped elsewhere."""

from __future__ import annotations

import importlib.util
import os

import pytest

pytest.importorskip("verl", reason="verl pins transformers<5.11; make test runs these in the verl venv")

from engine.backends.factory import create_backend  # noqa: E402
from engine.backends.verl.plan import ray_init_kwargs  # noqa: E402
from engine.config import SwarmConfig  # noqa: E402
from engine.errors import ConfigError  # noqa: E402


def _cfg(tmp_path, **kw) -> SwarmConfig:
    return SwarmConfig.model_validate(
        {"backend": "verl", "model": {"name": "tiny"}, "training": {"mini_batch_size": 16}, "run_dir": str(tmp_path), **kw}
    )


def test_a_config_mistake_is_reported_first(tmp_path):
    with pytest.raises(ConfigError, match="multiple of"):
        create_backend(_cfg(tmp_path, training={"mini_batch_size": 6, "micro_batch_size": 2}))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="checks the message of a venv without vLLM")
def test_without_vllm_boot_names_the_install_and_starts_no_ray_process(tmp_path):
    import ray

    with pytest.raises(ConfigError, match=r"vLLM is not installed.*pip install -e '\.\[gpu\]'.*backend: torch"):
        create_backend(_cfg(tmp_path))
    with pytest.raises(ConfigError, match="vLLM is not installed"):  # joining a cluster needs it here too
        create_backend(_cfg(tmp_path, verl={"ray_address": "127.0.0.1:1"}))
    assert not ray.is_initialized()


@pytest.mark.timeout(600)
def test_every_ray_worker_of_the_job_registers_the_swarm_losses():
    """`ray_init_kwargs` as the backend passes it to ray.init: the setup hook imports the registration module
    in each worker process before anything else runs there (verl's own workers also get external_lib)."""
    import ray

    assert not ray.is_initialized()
    ray.init(num_cpus=1, **ray_init_kwargs(SwarmConfig(backend="verl"), os.environ))
    try:

        @ray.remote
        def probe():
            import sys

            hooked = "engine.backends.verl.register" in sys.modules  # before this task imported anything
            from verl.trainer.ppo import core_algos

            return hooked, sorted(k for k in core_algos.POLICY_LOSS_REGISTRY if k.startswith("swarm_"))

        hooked, names = ray.get(probe.remote(), timeout=300)
    finally:
        ray.shutdown()
    assert hooked
    assert names == ["swarm_dapo", "swarm_gspo", "swarm_nll", "swarm_ppo_clip"]


def test_every_verl_api_the_backend_drives_exists_with_the_arguments_it_passes():
    """A verl upgrade that renames or reshapes one of these fails here, on CPU, instead of on a cluster."""
    import dataclasses
    import inspect

    from verl.checkpoint_engine import CheckpointEngineManager
    from verl.single_controller.ray import (
        RayClassWithInitArgs,
        RayWorkerGroup,
        ResourcePoolManager,
        create_colocated_worker_cls,  # noqa: F401
    )
    from verl.trainer.ppo.utils import Role
    from verl.utils.metric import reduce_metrics  # noqa: F401
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.rollout.llm_server import LLMServerManager
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding  # noqa: F401

    def params(fn) -> list[str]:
        return list(inspect.signature(inspect.unwrap(fn)).parameters)

    assert str(Role.ActorRollout) == "actor_rollout" and str(Role.ActorRolloutRef) == "actor_rollout_ref"
    assert {f.name for f in dataclasses.fields(ResourcePoolManager)} >= {"resource_pool_spec", "mapping"}
    assert {"config", "role"} <= set(params(ActorRolloutRefWorker.__init__))
    for method in ("init_model", "update_actor", "compute_log_prob", "compute_ref_log_prob"):
        assert callable(getattr(ActorRolloutRefWorker, method)), method
    assert params(ActorRolloutRefWorker.save_checkpoint)[:5] == ["self", "local_path", "hdfs_path", "global_step", "max_ckpt_to_keep"]
    assert params(ActorRolloutRefWorker.load_checkpoint)[:4] == ["self", "local_path", "hdfs_path", "del_local_after_load"]
    assert {"resource_pool", "ray_cls_with_init"} <= set(params(RayWorkerGroup.__init__))
    assert callable(RayWorkerGroup.spawn) and {"cls"} <= set(params(RayClassWithInitArgs.__init__))
    assert {"config", "worker_group", "rollout_resource_pool"} <= set(params(LLMServerManager.__init__))
    assert callable(LLMServerManager.create) and callable(LLMServerManager.get_replicas)
    assert params(CheckpointEngineManager.__init__) == ["self", "config", "actor_wg", "replicas"]
    assert params(CheckpointEngineManager.update_weights) == ["self", "global_steps"]
    assert callable(CheckpointEngineManager.sleep_replicas)
