"""Run a swarm server process: admin token handling, localhost binding, uvicorn."""

from __future__ import annotations

import logging
import os
import secrets
import sys
from pathlib import Path

import uvicorn

from engine.config import SwarmConfig
from engine.server.app import create_app
from engine.server.core import SwarmServer


def resolve_admin_token(token: str | None, token_file: Path) -> str:
    """Use the given token, else the one in `token_file`, else mint one and store it there (mode 0600)."""
    if token:
        return token
    if token_file.exists():
        return token_file.read_text().strip()
    token = "sk-admin-" + secrets.token_urlsafe(32)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def default_backend_factory(cfg: SwarmConfig):
    from engine.backends.factory import create_backend

    return create_backend(cfg)


def serve(
    config: SwarmConfig,
    host: str = "127.0.0.1",
    port: int = 10086,
    admin_token: str | None = None,
    token_file: Path | None = None,
    autostart: bool = False,
    log_level: str = "warning",
) -> None:
    """Serve until interrupted. Non-loopback hosts must be asked for explicitly (`--host 0.0.0.0`)."""
    token_file = token_file or Path(config.run_dir or ".swarm") / "admin_token"
    token = resolve_admin_token(admin_token or os.environ.get("SWARM_ADMIN_TOKEN"), token_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = SwarmServer(default_backend_factory, config)
    public = f"http://{host}:{port}" if host not in ("0.0.0.0", "::") else None
    app = create_app(server, token, public_url=public, autostart=autostart)

    print(f"swarm server on http://{host}:{port}  admin token in {token_file}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, loop="asyncio")
