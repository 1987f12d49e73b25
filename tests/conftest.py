"""Shared fixtures: real swarm servers on loopback ports, with the real torch backend and tiny model."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest
import torch
from tests_support import ADMIN_TOKEN, FakeOpenAIServer, ThreadedUvicorn, free_port, load_benchmark

from engine.client import SwarmClient
from engine.config import SwarmConfig
from engine.server.app import create_app
from engine.server.core import SwarmServer
from engine.server.serve import default_backend_factory

# Two cores: keep torch from oversubscribing them when tests run beside server threads.
torch.set_num_threads(2)

# Tests measure what they run: a step-0 result cached by an earlier test (or the developer's own runs)
# would skip the evaluation a test is about. tests/engine/training/test_eval0_cache.py turns it on.
os.environ["SWARM_EVAL0_CACHE"] = "off"



class LiveServer:
    """A SwarmServer behind uvicorn on a real loopback socket, in a background thread."""

    def __init__(self, config: SwarmConfig, backend_factory=default_backend_factory) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = SwarmServer(backend_factory, config)
        self._http = ThreadedUvicorn(create_app(self.server, ADMIN_TOKEN, public_url=self.url), self.port)

    def client(self, client_id: str = "default") -> SwarmClient:
        return SwarmClient(self.url, admin_token=ADMIN_TOKEN, client_id=client_id)

    def close(self) -> None:
        self._http.close()


@pytest.fixture
def live_server():
    """Factory: live_server(config, start, backend_factory) -> LiveServer (ROLLING unless start=False);
    all are closed at teardown."""
    servers: list[LiveServer] = []

    def make(config: SwarmConfig | None = None, start: bool = True, backend_factory=default_backend_factory) -> LiveServer:
        srv = LiveServer(config or SwarmConfig(), backend_factory)
        servers.append(srv)
        if start:
            with srv.client() as c:
                c.start(wait=True, timeout=120)
        return srv

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def fake_llm():
    """Factory: fake_llm(replies) -> a started FakeOpenAIServer (the scripted LLM provider); closed at teardown."""
    servers: list[FakeOpenAIServer] = []

    def start(replies: list[str | int]) -> FakeOpenAIServer:
        servers.append(FakeOpenAIServer(replies))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def in_process(live_server):
    """A team job's server factory over in-process live servers: the loop `swarm train` runs over
    subprocesses, without their start-up cost (the subprocess path is the cocktail test's)."""

    class InProcess:
        def __init__(self, agent_dir):
            self.srv = live_server(start=False)

        def client(self, client_id):
            return self.srv.client(client_id)

        def stop(self):
            pass  # live_server closes it at teardown

    return InProcess


@pytest.fixture(scope="session")
def chaos_job_reference(tmp_path_factory) -> Path:
    """The run dir of the chaos benchmark's job (`benchmarks/chaos.py` JOB: seeded, batch-invariant, 4 steps)
    run once, undisturbed, by the benchmark's own `job_reference`: the one run that the reproducibility,
    resume and chaos tests compare theirs with. Under xdist the first worker to ask runs it and the others
    wait on a file lock in the session's shared temporary root, so the suite runs it once, not per worker.
    Tests only read it: copy it to run it further."""
    chaos = load_benchmark("chaos")
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return chaos.job_reference(tmp_path_factory.mktemp("chaos_reference"))
    shared = tmp_path_factory.getbasetemp().parent  # this session's root, above every worker's own
    with open(shared / "chaos_reference.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when this worker dies
        work = shared / "chaos_reference"
        run_dir = work / "reference"
        if not (run_dir / "summary.json").is_file():
            shutil.rmtree(work, ignore_errors=True)  # what a worker that failed part way left
            work.mkdir()
            chaos.job_reference(work)
    return run_dir
