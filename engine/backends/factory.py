"""Backend selection: the config's `backend` key is read here and nowhere else."""

from __future__ import annotations

from engine.backends.base import Backend
from engine.config import SwarmConfig
from engine.errors import ConfigError


def create_backend(cfg: SwarmConfig) -> Backend:
    if cfg.backend == "torch":
        from engine.backends.torch.backend import TorchBackend

        return TorchBackend(cfg)
    if cfg.backend == "verl":
        try:
            from engine.backends.verl.backend import VerlBackend
        except ImportError as e:
            raise ConfigError(
                f"backend 'verl' needs the cluster extra ({e}); install it on a GPU machine with "
                "`pip install -e '.[verl]'`, or use backend: torch"
            ) from e
        return VerlBackend(cfg)
    raise ConfigError(f"unknown backend {cfg.backend!r}; valid: torch, verl")
