"""Shared fixtures: real swarm servers on loopback ports, with the real torch backend and tiny model."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import uvicorn
from tests_support import ADMIN_TOKEN, free_port

from engine.client import SwarmClient
from engine.config import SwarmConfig
from engine.server.app import create_app
from engine.server.core import SwarmServer
from engine.server.serve import default_backend_factory

# Two cores: keep torch from oversubscribing them when tests run beside server threads.
torch.set_num_threads(2)



class LiveServer:
    """A SwarmServer behind uvicorn on a real loopback socket, in a background thread."""

    def __init__(self, config: SwarmConfig, backend_factory=default_backend_factory) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = SwarmServer(backend_factory, config)
        app = create_app(self.server, ADMIN_TOKEN, public_url=self.url)
        self._uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._uv.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uv.started:
            if time.monotonic() > deadline:
                raise TimeoutError("uvicorn did not start")
            time.sleep(0.02)

    def client(self, client_id: str = "default") -> SwarmClient:
        return SwarmClient(self.url, admin_token=ADMIN_TOKEN, client_id=client_id)

    def close(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=30)


@pytest.fixture
def live_server():
    """Factory: live_server(config) -> started LiveServer (ROLLING); all are closed at teardown."""
    servers: list[LiveServer] = []

    def make(config: SwarmConfig | None = None, start: bool = True) -> LiveServer:
        srv = LiveServer(config or SwarmConfig())
        servers.append(srv)
        if start:
            with srv.client() as c:
                c.start(wait=True, timeout=120)
        return srv

    yield make
    for s in servers:
        s.close()
