"""TorchBackend: the embedded default. One process, one model object shared by inference and training.

Boot order: newest complete checkpoint in the run dir if any (weights or adapter, optimizer state and
step counter), else the configured model; optional peft LoRA wrap; then the batching inference engine and
the trainer over the same module.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from engine.config import SwarmConfig
from engine.models import load_model
from engine.training.checkpoint import checkpoint_due, commit_checkpoint, latest_checkpoint, read_state
from engine.training.metrics import MetricsLog
from engine.types import EpisodeResult

from .hacpo_trainer import HacpoTrainer
from .inference import DEFAULT_MAX_BATCH_ROWS, TorchInferenceEngine
from .trainer import TorchTrainer

log = logging.getLogger("swarm.backend.torch")


def _wrap_lora(model: torch.nn.Module, cfg: SwarmConfig, adapter_dir: Path | None) -> torch.nn.Module:
    from peft import LoraConfig as PeftLoraConfig
    from peft import PeftModel, get_peft_model

    if adapter_dir is not None:
        return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)
    lc = cfg.lora
    peft_cfg = PeftLoraConfig(
        r=lc.rank, lora_alpha=lc.alpha, lora_dropout=lc.dropout, target_modules=lc.target_modules
    )
    return get_peft_model(model, peft_cfg)


class TorchBackend:
    def __init__(self, cfg: SwarmConfig) -> None:
        self.cfg = cfg
        torch.manual_seed(cfg.model.seed)
        ckpt = latest_checkpoint(cfg.run_dir)
        model_cfg = cfg.model
        if ckpt is not None and not cfg.lora.enabled:
            model_cfg = cfg.model.model_copy(update={"name": str(ckpt / "model")})
        loaded = load_model(model_cfg, device=self.device)
        model = loaded.model
        if cfg.lora.enabled:
            model = _wrap_lora(model, cfg, ckpt / "adapter" if ckpt is not None else None)
        else:
            for p in model.parameters():
                p.requires_grad_(True)
        model.eval()
        self.model = model
        self.tokenizer = loaded.tokenizer
        self.inference = self._make_inference(loaded, ckpt)
        trainer_cls = TorchTrainer if cfg.collaboration is None else HacpoTrainer
        self.trainer = trainer_cls(model, loaded.tokenizer.pad_token_id, cfg)
        self.metrics = MetricsLog(cfg.run_dir)
        if ckpt is not None:
            state = read_state(ckpt)
            if state.get("optimizer", True):
                self.trainer.optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
            else:
                # Only the max_steps checkpoint drops the optimizer; training past it (a raised max_steps)
                # restarts AdamW's moments from zero, like a fresh fine-tune of these weights.
                log.warning("%s has no optimizer state (written at max_steps); AdamW starts afresh", ckpt)
            self.trainer.global_step = int(state["global_step"])
            self.trainer.load_extra_state(state)
            log.info("resumed from %s at step %d", ckpt, self.trainer.global_step)
        # Steps after the checkpoint (trained, then lost with the process) are trained again from here.
        dropped = self.metrics.supersede_after(self.trainer.global_step)
        # The time basis counts from here: a restart's first checkpoint comes at most every_s later.
        self._last_checkpoint_at = time.monotonic()
        if dropped:
            log.info("superseded %d metrics records after step %d", dropped, self.trainer.global_step)

    # Hooks for backends that keep this trainer but serve from another engine (engine.backends.vllm).
    device: str | None = None  # None: load_model's default (CUDA when available, else CPU)

    def _make_inference(self, loaded, ckpt: Path | None):
        """The inference engine; here batched generation over the very module the trainer updates."""
        # self.model (possibly LoRA-wrapped), not loaded.model: inference must see the adapter.
        # One request at a time: a row's logits then never depend on the rows beside it (batch_invariant).
        invariant = self.cfg.inference.batch_invariant
        rows = 1 if invariant else DEFAULT_MAX_BATCH_ROWS
        # A cached prefix's KV was computed in another pass shape (float rounding), and which prefixes are
        # cached depends on the order requests ran in: off when every number must repeat bit for bit.
        cache_bytes = 0 if invariant else self.cfg.inference.prefix_cache_mib << 20
        return TorchInferenceEngine(
            self.model,
            loaded.tokenizer,
            stop_token_ids=list(loaded.end_of_turn_ids),
            max_batch_rows=rows,
            prefix_cache_bytes=cache_bytes,
        )

    def _after_step(self, metrics: dict[str, float]) -> None:
        """Runs after each optimizer step, before the metrics are written (in-place weights: nothing to do)."""

    @property
    def global_step(self) -> int:
        return self.trainer.global_step

    def train_step(self, batch: list[EpisodeResult]) -> dict[str, float]:
        metrics = self.trainer.train_step(batch)
        self._after_step(metrics)
        self.metrics.write(metrics)
        return metrics

    def checkpoint(self) -> bool:
        t = self.cfg.training
        if self.cfg.run_dir is None or not checkpoint_due(
            self.global_step,
            every_steps=t.checkpoint_every,
            every_s=t.checkpoint_every_s,
            seconds_since_last=time.monotonic() - self._last_checkpoint_at,
            max_steps=t.max_steps,
            final=t.final_checkpoint,
        ):
            return False
        with_optimizer = t.max_steps is None or self.global_step < t.max_steps

        def write(tmp: Path) -> None:
            if self.cfg.lora.enabled:
                self.model.save_pretrained(tmp / "adapter")
            else:
                self.model.save_pretrained(tmp / "model", safe_serialization=True)
                self.tokenizer.save_pretrained(tmp / "model")
            if with_optimizer:
                torch.save(self.trainer.optimizer.state_dict(), tmp / "optimizer.pt")

        commit_checkpoint(
            self.cfg.run_dir,
            self.global_step,
            write,
            {
                "model": self.cfg.model.name,
                "lora": self.cfg.lora.enabled,
                "optimizer": with_optimizer,
                **self.trainer.extra_state(),
            },
        )
        self._last_checkpoint_at = time.monotonic()
        return True

    def close(self) -> None:
        self.inference.close()
