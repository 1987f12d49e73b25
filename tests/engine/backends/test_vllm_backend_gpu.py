"""`backend: vllm` end to end on a CUDA machine: a real training step through the server, and vLLM serving
the new weights right after it. Skipped without CUDA and vLLM (never run yet: see docs/engine.md)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (backend vllm)"),
]

from engine.config import SwarmConfig  # noqa: E402

PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]


def _greedy_logprobs(srv) -> list[float]:
    with srv.client() as c:
        ep = c.begin_episode("probe", is_eval=True)
        ep.openai().chat.completions.create(model="m", messages=PROMPT, max_tokens=6, temperature=0)
        lp = list(srv.server.episodes.get(ep.api_key).tracker.timelines[-1].blocks[-1].logprobs)
        ep.end(0.0)
        return lp


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
    before = _greedy_logprobs(srv)
    with srv.client() as c:
        for t in range(2):
            for g in range(2):
                with c.episode(f"task-{t}") as ep:
                    ep.openai().chat.completions.create(model="m", messages=PROMPT, max_tokens=8, temperature=1.0)
                    ep.end(float(g))
        st = c.wait_for_step(1, timeout=600)
    m = st["last_metrics"]
    assert m["episodes"] == 4 and m["grad_norm"] > 0 and m["weight_sync_s"] > 0
    after = _greedy_logprobs(srv)
    assert after != before  # vLLM serves the pushed weights without a restart
