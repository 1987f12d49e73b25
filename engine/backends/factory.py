"""Backend selection: the config's `backend` key is read here and nowhere else.

The GPU backends import their heavy dependencies lazily, so a CPU install never needs them; a missing one
becomes a ConfigError that names the one command that installs it.
"""

from __future__ import annotations

from engine.backends.base import GPU_INSTALL, Backend
from engine.config import SwarmConfig
from engine.errors import ConfigError


def _missing(backend: str, e: ImportError) -> ConfigError:
    return ConfigError(
        f"backend {backend!r} needs the GPU extra ({e}); on a CUDA machine run `{GPU_INSTALL}`, "
        "or use backend: torch"
    )


def create_backend(cfg: SwarmConfig) -> Backend:
    """Boot the backend `cfg.backend` names (blocking: loads the model, starts engines)."""
    if cfg.backend == "torch":
        from engine.backends.torch.backend import TorchBackend

        return TorchBackend(cfg)
    if cfg.backend == "vllm":
        from engine.backends.vllm.backend import VllmBackend  # imports vllm itself only at boot

        return VllmBackend(cfg)
    if cfg.backend == "verl":
        from engine.backends.verl.backend import VerlBackend  # imports verl itself only at boot

        return VerlBackend(cfg)
    raise ConfigError(f"unknown backend {cfg.backend!r}; valid: torch, vllm, verl")
