"""The one way out of the sandbox's network namespace: a swarm server's port, carried over a unix socket.

Outside, `UnixToTcp` listens on a unix socket (bound read-only into the sandbox) and connects each caller
to the server's loopback port. Inside, `TcpToUnix` listens on the same loopback port of the sandbox's own
namespace and connects each caller to that socket. The client keeps the server's URL
(http://127.0.0.1:PORT) and reaches that port and nothing else: every other address, loopback ports
included, belongs to an empty namespace.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

__all__ = ["TcpToUnix", "UnixToTcp"]

CHUNK = 1 << 16


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:  # half-close, so a reply still in flight the other way gets through
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class _Forwarder:
    """Accept on `listener`; connect every caller with `connect()` and copy bytes both ways."""

    def __init__(self, listener: socket.socket) -> None:
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, daemon=True, name=type(self).__name__)
        self._thread.start()

    def _connect(self) -> socket.socket:
        raise NotImplementedError

    def _serve(self) -> None:
        while True:
            try:
                a, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                b = self._connect()
            except OSError:
                a.close()
                continue
            finished: list[bool] = []  # one entry per direction that has ended
            lock = threading.Lock()
            for s, d in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(s, d, (a, b), finished, lock), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, pair: tuple, finished: list[bool], lock: threading.Lock) -> None:
        _pump(src, dst)
        with lock:
            finished.append(True)
            last = len(finished) == 2
        if last:  # the second direction to end closes the pair
            for s in pair:
                s.close()

    def close(self) -> None:
        self._listener.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class UnixToTcp(_Forwarder):
    """Outside the sandbox: unix socket `path` -> 127.0.0.1:`port`."""

    def __init__(self, path: Path, port: int) -> None:
        self.path, self.port = Path(path), port
        self.path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        self.path.chmod(0o600)
        listener.listen(64)
        super().__init__(listener)

    def _connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port))

    def close(self) -> None:
        super().close()
        self.path.unlink(missing_ok=True)


class TcpToUnix(_Forwarder):
    """Inside the sandbox: 127.0.0.1:`port` (of the sandbox's own namespace) -> unix socket `path`."""

    def __init__(self, port: int, path: Path) -> None:
        self.path = str(path)
        listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        super().__init__(listener)

    def _connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        return s
