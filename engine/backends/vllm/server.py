"""The `vllm serve` process of `backend: vllm`: its command line (a pure function of the config), start,
readiness wait and stop.

Why a process and not `vllm.LLM` inside the swarm server: vLLM's engine runs its own worker processes and
event loop either way; over loopback HTTP the same `VllmInference` adapter serves this backend and verl's
rollout replicas (which are HTTP servers too), and that adapter is tested on CPU against a scripted server.
The process binds 127.0.0.1 only: the swarm server stays the one public surface.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from engine.config import SwarmConfig
from engine.errors import ConfigError
from engine.fsutil import log_tail

__all__ = ["VllmServer", "vllm_serve_command", "vllm_serve_env"]


def vllm_serve_command(cfg: SwarmConfig, model_dir: str | Path, *, port: int, served_name: str) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server ...` for `cfg` (pure: the one SwarmConfig -> vLLM map).

    - `--logprobs-mode raw_logprobs`: logprobs of the untempered distribution, which the trainer recomputes.
    - `--max-model-len`: episodes.max_context_tokens, so vLLM rejects what the torch backend would.
    - LoRA: `--enable-lora` with room for two adapters (the serving one and the next being loaded).
    - Full weights: the IPC weight-transfer engine (trainer and vLLM share the GPU; handles, no copies).
    """
    v = cfg.vllm
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", served_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", cfg.model.dtype,
        "--seed", str(cfg.model.seed),
        "--gpu-memory-utilization", str(v.gpu_memory_utilization),
        "--tensor-parallel-size", str(v.tensor_parallel_size),
        "--max-num-seqs", str(v.max_num_seqs),
        "--max-model-len", str(cfg.episodes.max_context_tokens),
        "--logprobs-mode", "raw_logprobs",
    ]  # fmt: skip
    if cfg.lora.enabled:
        cmd += ["--enable-lora", "--max-lora-rank", str(cfg.lora.rank), "--max-loras", "2"]
    else:
        cmd += ["--weight-transfer-config", json.dumps({"backend": "ipc"})]
    return cmd + list(v.extra_args)


def vllm_serve_env(cfg: SwarmConfig, base: dict[str, str] | None = None) -> dict[str, str]:
    """The process environment: runtime LoRA loading, or the dev routes and pickled IPC handles that the
    full-weight push uses (acceptable because the server listens on loopback only)."""
    env = dict(os.environ if base is None else base)
    if cfg.lora.enabled:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    else:
        env["VLLM_SERVER_DEV_MODE"] = "1"
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    return env


class VllmServer:
    """A `vllm serve` child process; `url` once `wait_ready()` returned. Its log goes to `log_path`."""

    def __init__(self, cmd: list[str], env: dict[str, str], *, port: int, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in close()
        try:
            self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        except OSError as e:
            self._log.close()
            raise ConfigError(f"cannot start vLLM ({cmd[0]}): {e}") from e

    def wait_ready(self, timeout_s: float) -> None:
        """Poll `/health` until it answers 200; fail with the log's tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with code {self.proc.returncode} while starting:\n{self._tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        self.close()
        raise RuntimeError(
            f"vLLM was not ready after {timeout_s:.0f} s (raise vllm.startup_timeout_s if the model is big):\n"
            f"{self._tail()}"
        )

    def _tail(self, n: int = 4000) -> str:
        return log_tail(self.log_path, n)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log.close()
