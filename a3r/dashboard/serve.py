"""Run the dashboard: build its config from command-line values, refuse unsafe binds, start uvicorn."""

from __future__ import annotations

from typing import Any

import uvicorn
from pydantic import ValidationError

from a3r.dashboard.app import create_app
from a3r.dashboard.config import DashboardConfig
from a3r.exceptions import ConfigError

__all__ = ["build_config", "serve"]


def build_config(**values: Any) -> DashboardConfig:
    """A `DashboardConfig` from keyword values (None means the default); `ConfigError` says what is wrong."""
    try:
        return DashboardConfig.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as e:
        problems = "; ".join(
            (f"{'.'.join(str(p) for p in err['loc'])}: " if err["loc"] else "")
            + err["msg"].removeprefix("Value error, ")
            for err in e.errors()
        )
        raise ConfigError(f"dashboard settings are invalid: {problems}") from None


def serve(cfg: DashboardConfig) -> None:
    """Serve until interrupted; prints the address to open (with the token's one-time form when set)."""
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    where = f"http://{host}:{cfg.port}/" + (f"?token={cfg.token}" if cfg.token else "")
    print(f"a3r dashboard: reading {cfg.workspace.resolve()}; open {where}", flush=True)
    uvicorn.run(create_app(cfg), host=cfg.host, port=cfg.port, log_level="warning")
