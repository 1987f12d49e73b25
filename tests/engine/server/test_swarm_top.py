"""`swarm top`'s live loop, run as a real process on a pseudo-terminal (so rich really redraws): it
follows the server through a training step, survives the server going away, and Ctrl-C leaves it cleanly."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest
from tests_support import ADMIN_TOKEN

from engine.config import SwarmConfig

MSGS = [{"role": "user", "content": "hi"}]
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


class _Screen:
    """Everything the process writes to its terminal, read on a thread."""

    def __init__(self, fd: int) -> None:
        self.fd, self.data = fd, b""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # the terminal closed with the process
                return
            if not chunk:
                return
            self.data += chunk

    def wait_for(self, *needles: str, after: int = 0, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = ANSI.sub(b"", self.data[after:]).decode(errors="replace")
            if all(n in text for n in needles):
                return len(self.data)
            time.sleep(0.05)
        raise AssertionError(f"{needles} not shown within {timeout} s; screen tail: {self.data[-1500:]!r}")


@pytest.mark.slow
def test_top_follows_a_training_step_survives_the_server_and_quits_on_ctrl_c(live_server):
    srv = live_server(SwarmConfig(pool={"policy": "episode_count", "batch_size": 1, "group_size": 1}))
    master, slave = pty.openpty()
    # A screen tall enough for the whole view: rich crops a live view taller than the terminal (with
    # "..."), and the last step's metrics table grows with every metric the trainer adds.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 200, 200, 0, 0))
    # rich takes LINES/COLUMNS over the terminal's size when they are set (an xdist worker has
    # LINES=24 COLUMNS=80): name the pty's size, or the view is cropped to 24 rows.
    env = {**os.environ, "TERM": "xterm", "LINES": "200", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "top", "--url", srv.url, "--token", ADMIN_TOKEN, "--interval", "0.2"],
        stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
    )
    os.close(slave)
    screen = _Screen(master)
    try:
        seen = screen.wait_for("swarm server: ROLLING", "step=0")
        with srv.client() as c:
            with c.episode("t") as ep:
                ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
                ep.end(1.0)
            c.wait_for_step(1, timeout=120)
        seen = screen.wait_for("step=1", "step_time_s", after=seen)  # redrawn, live
        srv.close()
        screen.wait_for("cannot reach", after=seen)  # still running, saying what happened
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        time.sleep(0.2)
        assert b"Traceback" not in screen.data and b"KeyboardInterrupt" not in screen.data
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
