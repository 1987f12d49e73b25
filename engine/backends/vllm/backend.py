"""`backend: vllm`: vLLM serves the rollouts, the torch trainer trains on the same CUDA host.

Boot: the torch backend's own boot (checkpoint resume, LoRA wrap, trainer on `cuda`), except that its
inference engine is a `vllm serve` child process on loopback, started from the same weights (the resumed
checkpoint's model directory, or the base model plus the resumed adapter) and driven token-in/token-out by
`VllmInference`. After every optimizer step the new weights are pushed to vLLM before the server resumes
inference (the server pauses inference around `train_step`, so no request is in flight):
- LoRA: the adapter is saved under the run dir and loaded as the next adapter version (runtime LoRA API);
- full weights: vLLM's IPC weight-transfer engine hands CUDA IPC handles of the trainer's parameters to
  vLLM (`/start_weight_update`, `trainer_send_weights`, `/finish_weight_update`); nothing is copied to disk.

Old log-probs: vLLM reports the sampling-time ones (raw, untempered), computed by other kernels than the
trainer's transformers forward. A ratio built on them starts off 1 by the kernel gap, which a GSPO sequence
clip reads as off-policy (in bfloat16 on the torch backend the gap put 69-97% of sequences past GSPO's
clips, docs/benchmarks/old_logprob_gap.md), so `training.old_logprobs: auto` has the trainer recompute them
on this backend before each step's first update.

Not run on a GPU yet: see docs/engine.md, "GPU backends".
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from engine.backends.torch.backend import TorchBackend
from engine.backends.vllm.inference import VllmError, VllmInference
from engine.backends.vllm.server import VllmServer, vllm_serve_command, vllm_serve_env
from engine.config import SwarmConfig
from engine.errors import ConfigError
from engine.models.loader import resolve_model_dir

log = logging.getLogger("swarm.backend.vllm")

SERVED_NAME = "swarm-policy"


def require_cuda(backend: str) -> None:
    """Fail with what to do when this machine has no CUDA device (the GPU backends' first check)."""
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(
            f"backend {backend!r} needs a CUDA GPU and this machine has none (torch {torch.__version__}, "
            "torch.cuda.is_available() is False); use backend: torch here"
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def push_full_weights(base_url: str, model: Any) -> None:
    """Hand the trainer's parameters to a colocated vLLM server through CUDA IPC handles (vLLM's weight
    transfer, HTTP mode). The names are Hugging Face checkpoint names (`is_checkpoint_format`), which
    vLLM's loader maps onto its fused layers."""
    try:
        from vllm.distributed.weight_transfer.ipc_engine import (
            IPCTrainerSendWeightsArgs,
            IPCWeightTransferEngine,
        )
    except ImportError as e:
        raise VllmError(
            f"this vLLM has no IPC weight transfer ({e}); install vLLM >= 0.21, or train a LoRA adapter "
            "(lora.enabled: true), which is pushed through the runtime LoRA API instead"
        ) from e

    def post(path: str, body: dict[str, Any]) -> None:
        r = httpx.post(base_url + path, json=body, timeout=600)
        if r.status_code != 200:
            raise VllmError(f"vLLM {path} answered HTTP {r.status_code}: {r.text[:500]}")

    # The transport field is `mode` in vLLM 0.21 and was renamed `send_mode` later; accept both.
    fields = {f.name for f in dataclasses.fields(IPCTrainerSendWeightsArgs)}
    transport = "send_mode" if "send_mode" in fields else "mode"
    post("/start_weight_update", {"is_checkpoint_format": True})
    IPCWeightTransferEngine.trainer_send_weights(
        iterator=((name, p.detach()) for name, p in model.named_parameters()),
        trainer_args=IPCTrainerSendWeightsArgs(**{transport: "http", "url": base_url}),
    )
    post("/finish_weight_update", {})


class VllmBackend(TorchBackend):
    """The torch trainer on `cuda` with a vLLM server for inference; weights pushed after each step."""

    device = "cuda"

    def __init__(self, cfg: SwarmConfig) -> None:
        require_cuda("vllm")
        try:
            import vllm  # noqa: F401  (only to fail early with the install command)
        except ImportError as e:
            raise ConfigError(
                f"backend 'vllm' needs vLLM ({e}); on a CUDA machine run `pip install -e '.[gpu]'`"
            ) from e
        self._server: VllmServer | None = None
        self._adapters = Path(cfg.run_dir) / "vllm_adapters" if cfg.run_dir else Path(tempfile.mkdtemp("-swarm-lora"))
        try:
            super().__init__(cfg)
        except BaseException:
            if self._server is not None:
                self._server.close()
            raise

    def _make_inference(self, loaded, ckpt: Path | None) -> VllmInference:
        cfg = self.cfg
        # vLLM starts from the weights the trainer starts from: the resumed full model, or the base model
        # (a resumed adapter is pushed right after start).
        model_dir = loaded.path if not cfg.lora.enabled else resolve_model_dir(cfg.model.name, seed=cfg.model.seed)
        port = _free_port()
        log_path = Path(cfg.run_dir or self._adapters) / "vllm.log"
        self._server = VllmServer(
            vllm_serve_command(cfg, model_dir, port=port, served_name=SERVED_NAME),
            vllm_serve_env(cfg),
            port=port,
            log_path=log_path,
        )
        self._server.wait_ready(cfg.vllm.startup_timeout_s)
        engine = VllmInference(
            self._server.url,
            SERVED_NAME,
            stop_token_ids=list(loaded.end_of_turn_ids),
            max_model_len=cfg.episodes.max_context_tokens,
            vocab_size=self.model.get_input_embeddings().num_embeddings,
        )
        if cfg.lora.enabled and ckpt is not None:
            engine.push_lora(str(ckpt / "adapter"))
        if not cfg.lora.enabled:
            # Once per server: IPC needs no init info, but vLLM's weight-update routes expect the engine
            # initialised before the first /start_weight_update.
            r = httpx.post(self._server.url + "/init_weight_transfer_engine", json={"init_info": {}}, timeout=300)
            if r.status_code != 200:
                raise VllmError(f"vLLM /init_weight_transfer_engine answered HTTP {r.status_code}: {r.text[:500]}")
        return engine

    def _after_step(self, metrics: dict[str, float]) -> None:
        t0 = time.perf_counter()
        if self.cfg.lora.enabled:
            out = self._adapters / f"step-{self.global_step:06d}"
            self.model.save_pretrained(out)
            self.inference.push_lora(str(out))
            previous = self._adapters / f"step-{self.global_step - 1:06d}"
            if previous.is_dir():  # vLLM unloaded it in push_lora; keep only the serving one on disk
                import shutil

                shutil.rmtree(previous, ignore_errors=True)
        else:
            push_full_weights(self._server.url, self.model)
        metrics["weight_sync_s"] = time.perf_counter() - t0

    def close(self) -> None:
        try:
            self.inference.close()
        finally:
            if self._server is not None:
                self._server.close()
