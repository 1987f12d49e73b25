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
