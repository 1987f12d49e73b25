"""Booting `backend: verl` where verl is installed: what this (CPU) machine gets told, and the part of the
cluster set-up that runs without a GPU (a real one-node Ray cluster whose workers register the swarm
losses through the job's setup hook). Needs verl: `make test-verl`; skipped elsewhere."""

from __future__ import annotations

import importlib.util
import os

import pytest

pytest.importorskip("verl", reason="verl pins transformers<5.11; run in the verl venv (make test-verl)")

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
