"""LoRA training survives a SIGKILL: the restarted server loads the checkpoint's adapter (not a fresh one)
and its optimizer state, resumes at the step it reached, and keeps training from there."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from safetensors.torch import load_file
from tests_support import ADMIN_TOKEN, free_port, serve_process

from engine.client import SwarmClient
from engine.config import SwarmConfig
from engine.training.checkpoint import latest_checkpoint

PROMPT = [{"role": "user", "content": "Count to three."}]


def _play_group(c: SwarmClient, task: str) -> None:
    for reward in (0.0, 1.0):
        with c.episode(task) as ep:
            ep.openai().chat.completions.create(model="tiny", messages=PROMPT, max_tokens=5)
            assert ep.end(reward).accepted


@pytest.mark.slow
def test_a_lora_adapter_resumes_after_sigkill(tmp_path):
    from peft import get_peft_model_state_dict

    from engine.backends.torch.backend import TorchBackend

    run_dir, port = tmp_path / "run", free_port()
    url = f"http://127.0.0.1:{port}"
    cfg = SwarmConfig(
        run_dir=str(run_dir),
        lora={"enabled": True, "rank": 4},
        pool={"policy": "task_count", "batch_size": 1, "group_size": 2},
        training={"lr": 1e-2, "mini_batch_size": 2, "micro_batch_size": 2, "checkpoint_every": 1},
    )
    proc = serve_process(run_dir, port)
    try:
        with SwarmClient(url, ADMIN_TOKEN) as c:
            c.configure(cfg)
            c.start(wait=True, timeout=120)
            _play_group(c, "a")
            c.wait_for_step(1, timeout=120)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

        ckpt = latest_checkpoint(run_dir)
        assert ckpt is not None and (ckpt / "adapter").is_dir() and not (ckpt / "model").exists()
        saved = load_file(ckpt / "adapter" / "adapter_model.safetensors")
        # lora_B starts at zero: a non-zero one proves the checkpoint holds a trained adapter
        assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in saved.items())
        saved_opt = torch.load(ckpt / "optimizer.pt", weights_only=True)

        backend = TorchBackend(SwarmConfig.from_yaml(run_dir / "swarm_config.yaml"))
        try:
            assert backend.global_step == 1
            loaded = get_peft_model_state_dict(backend.model)
            assert loaded.keys() == saved.keys()
            assert all(torch.equal(loaded[k], saved[k]) for k in saved)
            state = backend.trainer.optimizer.state_dict()["state"]
            assert state.keys() == saved_opt["state"].keys()
            assert all(torch.equal(state[k]["exp_avg"], v["exp_avg"]) for k, v in saved_opt["state"].items())
            # only the adapter trains; the base weights stay frozen
            assert all(("lora_" in n) == p.requires_grad for n, p in backend.model.named_parameters())
        finally:
            backend.close()

        proc = serve_process(run_dir, port, "--start")  # the run dir alone: its saved config, its checkpoint
        with SwarmClient(url, ADMIN_TOKEN) as c:
            assert c.wait_for_state({"ROLLING"}, timeout=120)["global_step"] == 1
            _play_group(c, "b")
            st = c.wait_for_step(2, timeout=120)
            assert st["error"] is None
        step2 = load_file(latest_checkpoint(run_dir) / "adapter" / "adapter_model.safetensors")
        assert any(not torch.equal(step2[k], saved[k]) for k in saved)  # it went on training the same adapter
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
