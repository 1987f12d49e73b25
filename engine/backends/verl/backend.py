"""`backend: verl`: boot-time checks and the translated verl config; the cluster training loop is not
shipped yet.

What exists (and is tested on CPU): the SwarmConfig -> verl config translation validated by verl
(`engine.backends.verl.config`), the pooled-samples -> DataProto conversion (`dataproto`), and the
registration of the project's losses and advantage estimators into verl's registries (`register`), plus
the token-in/token-out adapter for vLLM servers such as verl's rollout replicas (`engine.backends.vllm`).
What does not: driving verl's FSDP actor and vLLM replicas on a Ray cluster from the swarm pool (worker
groups, weight sync to the replicas, verl checkpoints). Booting therefore stops with a ConfigError that
says so, after the checks that would fail first on a real cluster, instead of an ImportError.
"""

from __future__ import annotations

from engine.config import SwarmConfig
from engine.errors import ConfigError

NOT_SHIPPED = (
    "backend 'verl' cannot train yet: its Ray training loop (verl's FSDP actor and vLLM replicas fed from "
    "the swarm pool) is not implemented. Shipped so far: the verl config translation, the DataProto "
    "conversion and the loss registration (engine.backends.verl). Use backend: vllm on one CUDA host, or "
    "backend: torch."
)


class VerlBackend:
    """Refuses to boot with what is missing (see the module docstring); never a half-working server."""

    def __init__(self, cfg: SwarmConfig) -> None:
        try:
            import verl  # noqa: F401
        except ImportError as e:
            raise ConfigError(
                f"backend 'verl' needs verl ({e}); on a CUDA machine run `pip install -e '.[gpu]'`. "
                + NOT_SHIPPED
            ) from e
        from engine.backends.verl.config import compose_verl_config
        from engine.models.loader import resolve_model_dir

        # The translation's and verl's own checks still run, so a config error is reported as such.
        compose_verl_config(cfg, model_path=str(resolve_model_dir(cfg.model.name, seed=cfg.model.seed)))
        raise ConfigError(NOT_SHIPPED)
