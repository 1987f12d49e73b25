"""Helpers for the dashboard's browser tests: find a Chromium, serve the dashboard on a real socket."""

from __future__ import annotations

import os
import shutil

from tests_support import ThreadedUvicorn, free_port

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
    """The dashboard app on a loopback port, served in a background thread."""

    def __init__(self, cfg: DashboardConfig) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._http = ThreadedUvicorn(create_app(cfg.model_copy(update={"port": self.port})), self.port)

    def close(self) -> None:
        self._http.close()
