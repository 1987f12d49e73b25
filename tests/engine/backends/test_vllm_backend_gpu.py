"""`backend: vllm` end to end on a CUDA machine: a real training step through the server, and vLLM serving
the new weights right after it. Skipped without CUDA and vLLM (never run yet: see docs/engine.md)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (backend vllm)"),
]

from tests_support import greedy_logprobs, train_one_step  # noqa: E402

from engine.config import SwarmConfig  # noqa: E402


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_step_on_vllm_pushes_weights_that_vllm_then_serves(live_server, lora, tmp_path):
    pytest.importorskip("vllm", reason="backend vllm needs vLLM: pip install -e '.[gpu]'")
    srv = live_server(
        SwarmConfig(
            backend="vllm",
            model={"name": "smollm2-135m", "dtype": "bfloat16"},
            pool={"policy": "task_count", "batch_size": 2, "group_size": 2},
            training={"lr": 1e-3, "mini_batch_size": 4, "micro_batch_size": 2},
            lora={"enabled": lora, "rank": 8},
            vllm={"gpu_memory_utilization": 0.3, "extra_args": ["--enforce-eager"]},
            run_dir=str(tmp_path),
        )
    )
    before = greedy_logprobs(srv)
    st = train_one_step(srv, timeout=600)
    m = st["last_metrics"]
    assert m["episodes"] == 4 and m["grad_norm"] > 0 and m["weight_sync_s"] > 0
    after = greedy_logprobs(srv)
    assert after != before  # vLLM serves the pushed weights without a restart
