"""Run a swarm server process: admin token handling, localhost binding, uvicorn."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path

import uvicorn

from engine.config import SwarmConfig
from engine.errors import ConfigError
from engine.server.app import create_app
from engine.server.core import SwarmServer


def resolve_admin_token(token: str | None, token_file: Path) -> str:
    """Use the given token, else the one in `token_file`, else mint one and store it there (mode 0600).

    A token file that holds nothing is a ConfigError: taken as the token "", it would make an empty
    bearer credential an admin one.
    """
    if token:
        return token
    if token_file.exists():
        stored = token_file.read_text().strip()
        if not stored:
            raise ConfigError(
                f"admin token file {token_file} is empty; delete it to have a new token minted, "
                "or write a token into it"
            )
        return stored
    token = "sk-admin-" + secrets.token_urlsafe(32)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


PARENT_ENV = "SWARM_EXIT_WITH_PARENT"


def exit_with_parent(parent_pid: int, period_s: float = 1.0) -> threading.Thread:
    """SIGTERM this process (uvicorn then shuts down cleanly) once `parent_pid` is no longer its parent.

    A job that starts its own server (`engine.jobs.ServerProcess`) sets this, so killing the job never
    leaves an orphan server training on the machine and writing into the job's run directory.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period_s)
        os.kill(os.getpid(), signal.SIGTERM)

    t = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    t.start()
    return t


# How long an idle keep-alive connection stays open. uvicorn's default (5 s) equals the pool expiry of
# httpx and of the openai SDK (5 s), so a client reusing a connection at that instant races the server's
# close and loses its response ("Server disconnected without sending a response"); a training step
# (WEIGHT_SYNCING) is exactly the kind of pause that leaves connections idle that long. The server waits
# well past any client pool's expiry, so the client always closes first.
KEEP_ALIVE_S = 75


def uvicorn_config(app, host: str, port: int, log_level: str = "warning") -> uvicorn.Config:
    """The uvicorn settings every swarm server runs with (also the test fixtures')."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, loop="asyncio", timeout_keep_alive=KEEP_ALIVE_S)


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
    given = admin_token or os.environ.get("SWARM_ADMIN_TOKEN")
    token = resolve_admin_token(given, token_file)
    # Say where the token really is: a given one is never written to the file.
    where = "--token" if admin_token else "$SWARM_ADMIN_TOKEN" if given else str(token_file)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if os.environ.get(PARENT_ENV):
        exit_with_parent(int(os.environ[PARENT_ENV]))
    server = SwarmServer(default_backend_factory, config)
    public = f"http://{host}:{port}" if host not in ("0.0.0.0", "::") else None
    app = create_app(server, token, public_url=public, autostart=autostart)

    print(f"swarm server on http://{host}:{port}  admin token in {where}", file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn_config(app, host, port, log_level)).run()
