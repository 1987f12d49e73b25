"""`backend: verl` end to end on a CUDA machine: a one-node Ray cluster started by the server, a training step
through verl's FSDP actor, the replicas serving the synced weights, a verl checkpoint and a resume.
Skipped without CUDA, verl and vLLM. Never run yet: see docs/engine.md, "GPU backends"."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (backend verl)"),
]

from tests_support import greedy_logprobs, train_one_step  # noqa: E402

from engine.config import SwarmConfig  # noqa: E402
from engine.training.checkpoint import latest_checkpoint, read_state  # noqa: E402


def _start(live_server, cfg: SwarmConfig):
    srv = live_server(cfg, start=False)
    with srv.client() as c:
        c.start(wait=True, timeout=1200)  # Ray, the FSDP actor and the vLLM replica take minutes to come up
    return srv


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_verl_step_syncs_weights_to_the_replicas_checkpoints_and_resumes(live_server, lora, tmp_path):
    pytest.importorskip("verl", reason="backend verl needs verl: pip install -e '.[gpu]'")
    pytest.importorskip("vllm", reason="backend verl needs vLLM: pip install -e '.[gpu]'")
    cfg = SwarmConfig(
        backend="verl",
        model={"name": "smollm2-135m", "dtype": "bfloat16"},
        pool={"policy": "task_count", "batch_size": 2, "group_size": 2},
        training={"lr": 1e-3, "mini_batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 1},
        lora={"enabled": lora, "rank": 8},
        verl={"n_gpus_per_node": 1, "gpu_memory_utilization": 0.3},
        run_dir=str(tmp_path),
    )
    srv = _start(live_server, cfg)
    before = greedy_logprobs(srv)
    st = train_one_step(srv, timeout=900)
    m = st["last_metrics"]
    assert m["episodes"] == 4 and m["grad_norm"] > 0 and m["weight_sync_s"] > 0 and m["optimizer_steps"] == 1
    after = greedy_logprobs(srv)
    assert after != before  # the replicas serve the synced weights
    state = read_state(latest_checkpoint(tmp_path))
    assert state["backend"] == "verl" and state["global_step"] == 1
    with srv.client() as c:
        c.stop()  # the backend closes: the Ray session it started ends, the GPU is free again
    srv.close()

    again = _start(live_server, cfg)  # same run dir: verl's checkpoint is loaded and synced
    with again.client() as c:
        assert c.status()["global_step"] == 1
    assert greedy_logprobs(again) == pytest.approx(after, abs=0.05)
    with again.client() as c:
        c.stop()
