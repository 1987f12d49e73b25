"""Constants shared by conftest and tests (conftest itself is not importable under importlib mode)."""

ADMIN_TOKEN = "sk-admin-test-" + "x" * 24


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedUvicorn:
    """An ASGI app served by uvicorn on a real loopback port, in a background thread."""

    def __init__(self, app, port: int) -> None:
        import threading
        import time

        import uvicorn

        self._uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._uv.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uv.started:
            if time.monotonic() > deadline:
                raise TimeoutError("uvicorn did not start")
            time.sleep(0.02)

    def close(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=30)


def serve_process(run_dir, port: int, *extra: str):
    """`swarm serve --run-dir RUN_DIR --port PORT [extra]` as a subprocess with ADMIN_TOKEN; waits for /health."""
    import os
    import subprocess
    import sys
    import time

    import httpx

    env = {**os.environ, "SWARM_ADMIN_TOKEN": ADMIN_TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--run-dir", str(run_dir), "--port", str(port), *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise TimeoutError("server did not come up")


def load_benchmark(name: str):
    """Import `benchmarks/<name>.py` (a script, not a package) as module `name`, for its pure helpers."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
