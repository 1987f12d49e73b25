"""Helpers for the dashboard's browser tests: find a Chromium, serve the dashboard on a real socket."""

from __future__ import annotations

import os
import shutil
import threading
import time

import uvicorn
from tests_support import free_port

from a3r.dashboard import DashboardConfig, create_app

INSTALL_HINT = (
    "no Chromium for the dashboard's browser tests: `make setup` installs it on Debian/Ubuntu as root "
    "(apt-get install chromium), or set A3R_CHROMIUM to a Chromium/Chrome binary; Playwright comes with "
    "`pip install -e .[dev]`"
)


def chromium_path() -> str | None:
    """The system Chromium to drive (Playwright's own browser download is not used)."""
    for candidate in (os.environ.get("A3R_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (found := shutil.which(candidate)):
            return found
    return None


class LiveDashboard:
    """The dashboard app behind uvicorn on a loopback port, in a background thread."""

    def __init__(self, cfg: DashboardConfig) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(cfg.model_copy(update={"port": self.port}))
        self._uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._uv.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uv.started:
            if time.monotonic() > deadline:
                raise TimeoutError("dashboard did not start")
            time.sleep(0.02)

    def close(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=30)
