"""`backend: vllm` / `backend: verl` in the typed config, and what booting them says on this machine."""

from __future__ import annotations

import pytest
import torch

from engine.backends.factory import create_backend
from engine.config import SwarmConfig
from engine.errors import ConfigError

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without CUDA gets")


def test_gpu_backends_validate_and_round_trip_through_yaml(tmp_path):
    cfg = SwarmConfig.model_validate(
        {"backend": "verl", "verl": {"nnodes": 2, "n_gpus_per_node": 8}, "vllm": {"gpu_memory_utilization": 0.3}}
    )
    path = tmp_path / "c.yaml"
    path.write_text(cfg.to_yaml())
    again = SwarmConfig.from_yaml(path)
    assert again == cfg and again.verl.nnodes == 2 and again.vllm.gpu_memory_utilization == 0.3
    assert SwarmConfig(backend="vllm").backend == "vllm"


def test_unknown_backend_and_bad_gpu_fields_are_rejected():
    with pytest.raises(ValueError, match="backend"):
        SwarmConfig.model_validate({"backend": "tensorrt"})
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        SwarmConfig.model_validate({"vllm": {"gpu_memory_utilization": 1.5}})


def test_verl_refuses_collaboration_with_the_reason():
    with pytest.raises(ValueError, match="HACPO.*backend: torch or vllm"):
        SwarmConfig.model_validate(
            {"backend": "verl", "pool": {"policy": "any_client_agrees"}, "collaboration": {"agent": "a"}}
        )


@no_cuda
def test_vllm_backend_on_a_machine_without_cuda_says_so():
    with pytest.raises(ConfigError, match="needs a CUDA GPU.*use backend: torch"):
        create_backend(SwarmConfig(backend="vllm"))


@no_cuda
def test_verl_backend_on_this_machine_says_what_is_missing():
    # Without verl: the install command. With verl (the verl venv) the config is translated and checked
    # first, then what a CPU machine lacks (vLLM, CUDA). Either way a ConfigError naming the fix, before any
    # Ray process starts; never an ImportError. (tests/engine/backends/test_verl_boot.py has the details.)
    with pytest.raises(ConfigError, match=r"needs verl .*pip install|vLLM is not installed|needs CUDA GPUs"):
        create_backend(SwarmConfig(backend="verl", model={"name": "tiny"}, training={"mini_batch_size": 16}))
