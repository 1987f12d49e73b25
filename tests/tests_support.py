"""Constants shared by conftest and tests (conftest itself is not importable under importlib mode)."""

ADMIN_TOKEN = "sk-admin-test-" + "x" * 24


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
