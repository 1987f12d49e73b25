"""Checkpoints on a time basis and without optimizer state at max_steps: what is written when, and that a
server killed between checkpoints resumes correctly (real `swarm serve` subprocess, tiny model)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch
from tests_support import ADMIN_TOKEN, free_port
from tests_support import serve_process as _serve

from engine.client import SwarmClient
from engine.config import SwarmConfig
from engine.training.checkpoint import checkpoint_due, latest_checkpoint, read_state

PROMPT = [{"role": "user", "content": "Count to three."}]


def _play(c: SwarmClient, task: str, rewards: list[float], sleep_before_end_s: float = 0.0) -> list[str]:
    ids = []
    for r in rewards:
        with c.episode(task) as ep:
            ep.openai().chat.completions.create(model="tiny", messages=PROMPT, max_tokens=5)
            time.sleep(sleep_before_end_s)
            assert ep.end(r).accepted
            ids.append(ep.episode_id)
    return ids


def _pool_ids(c: SwarmClient) -> set[str]:
    return {e["episode_id"] for e in c._http.get("/swarm/pool/episodes").json()["episodes"]}


def _due(step, every_steps=1, every_s=0.0, since=0.0, max_steps=None, final=True) -> bool:
    return checkpoint_due(
        step, every_steps=every_steps, every_s=every_s, seconds_since_last=since, max_steps=max_steps, final=final
    )


def test_checkpoint_due_rule():
    # step basis (every_s 0): every k-th step, as before
    assert _due(3, every_steps=1) and _due(4, every_steps=2) and not _due(3, every_steps=2)
    assert not _due(4, every_steps=0) and not _due(4, every_steps=0, max_steps=4)  # 0: never, not even the end
    # time basis: a due step is written only once every_s has passed since the last write
    assert not _due(5, every_s=120.0, since=119.9)
    assert _due(5, every_s=120.0, since=120.0)
    assert not _due(5, every_steps=2, every_s=120.0, since=500.0)  # and only on the steps every_steps names
    # max_steps: written iff final, whatever the clock or the step count says
    assert _due(7, every_steps=5, every_s=120.0, since=0.0, max_steps=7)
    assert not _due(10, every_steps=5, every_s=0.0, since=999.0, max_steps=10, final=False)


def test_config_rejects_a_negative_interval():
    with pytest.raises(ValueError):
        SwarmConfig(training={"checkpoint_every_s": -1.0})


def _cfg(run_dir, every_s: float, max_steps: int | None) -> SwarmConfig:
    return SwarmConfig(
        run_dir=str(run_dir),
        pool={"policy": "task_count", "batch_size": 2, "group_size": 2},
        training={
            "lr": 1e-2, "mini_batch_size": 4, "micro_batch_size": 2,
            "checkpoint_every": 1, "checkpoint_every_s": every_s, "max_steps": max_steps,
        },
    )


def test_time_basis_kill_before_first_checkpoint_retrains_from_journal_and_ends_weights_only(tmp_path):
    """every_s far away: step 1 writes nothing; a SIGKILL then loses step 1's training but not its
    episodes (back in the pool, retrained); max_steps writes the weights without optimizer state, and a
    backend booted from that checkpoint is at max_steps."""
    run_dir = tmp_path / "run"
    port = free_port()
    proc = _serve(run_dir, port)
    try:
        with SwarmClient(f"http://127.0.0.1:{port}", ADMIN_TOKEN) as c:
            c.configure(_cfg(run_dir, every_s=3600.0, max_steps=2))
            c.start(wait=True, timeout=120)
            _play(c, "a", [0.0, 1.0])
            _play(c, "b", [1.0, 0.0])
            st = c.wait_for_step(1, timeout=120)
            assert st["last_metrics"]["checkpoint_s"] >= 0.0 and st["last_metrics"]["update_s"] > 0.0
            assert st["last_metrics"]["checkpoint_written"] == 0.0  # run_cost.py counts writes by it
        assert latest_checkpoint(run_dir) is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

        proc = _serve(run_dir, port, "--start")
        with SwarmClient(f"http://127.0.0.1:{port}", ADMIN_TOKEN) as c:
            # Booted at step 0 (step 1's training lost), the journal's episodes are back and retrain step 1
            # with no new episode played: a lost journal would leave the server at step 0.
            st = c.wait_for_step(1, timeout=120)
            assert st["global_step"] == 1 and latest_checkpoint(run_dir) is None
            _play(c, "c", [0.0, 1.0])
            _play(c, "d", [1.0, 0.0])
            st = c.wait_for_step(2, timeout=120)
            assert st["global_step"] == 2 and _pool_ids(c) == set()
            assert st["last_metrics"]["checkpoint_written"] == 1.0
        ckpt = latest_checkpoint(run_dir)
        assert ckpt is not None and ckpt.name == "step-000002"
        assert read_state(ckpt)["optimizer"] is False and not (ckpt / "optimizer.pt").exists()
        assert (ckpt / "model" / "model.safetensors").is_file()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

        from engine.backends.torch.backend import TorchBackend

        backend = TorchBackend(SwarmConfig.from_yaml(run_dir / "swarm_config.yaml"))
        try:
            assert backend.global_step == 2
        finally:
            backend.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_time_basis_checkpoint_after_interval_resumes_with_its_optimizer_state(tmp_path):
    """every_s 1: the test holds the batch's last episode open past it (the clock starts at the backend's
    boot), so step 1 is written, with AdamW state, which a restarted backend loads exactly."""
    every_s = 1.0
    run_dir = tmp_path / "run"
    port = free_port()
    proc = _serve(run_dir, port)
    try:
        with SwarmClient(f"http://127.0.0.1:{port}", ADMIN_TOKEN) as c:
            c.configure(_cfg(run_dir, every_s=every_s, max_steps=None))
            c.start(wait=True, timeout=120)
            _play(c, "a", [0.0, 1.0])
            _play(c, "b", [1.0, 0.0], sleep_before_end_s=every_s)
            c.wait_for_step(1, timeout=120)
        ckpt = latest_checkpoint(run_dir)
        assert ckpt is not None and ckpt.name == "step-000001"
        assert json.loads((ckpt / "state.json").read_text())["optimizer"] is True
        saved = torch.load(ckpt / "optimizer.pt", weights_only=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

        from engine.backends.torch.backend import TorchBackend

        backend = TorchBackend(SwarmConfig.from_yaml(run_dir / "swarm_config.yaml"))
        try:
            assert backend.global_step == 1
            loaded = backend.trainer.optimizer.state_dict()["state"]
            assert loaded.keys() == saved["state"].keys() and loaded
            for k, v in saved["state"].items():
                assert torch.equal(loaded[k]["exp_avg"], v["exp_avg"])
                assert torch.equal(loaded[k]["exp_avg_sq"], v["exp_avg_sq"])
        finally:
            backend.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
