"""Typed configuration of the dashboard (`a3r dashboard`, `swarm dashboard`): what it reads and how it is
reached. Frozen, validated at construction with messages that say what to change."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["DashboardConfig", "SwarmTarget", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether binding `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname other than localhost may resolve to anything


class SwarmTarget(BaseModel):
    """A swarm server whose status API the dashboard reads (server-side: its admin token never reaches a
    browser)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(description="Base URL of the server, e.g. http://127.0.0.1:10086.")
    token: str | None = Field(None, description="The server's admin token (its status API needs it).")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"swarm server url {v!r} must start with http:// or https://")
        return v.rstrip("/")


class DashboardConfig(BaseModel):
    """Where the dashboard reads from and where it listens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # -- what it reads ----------------------------------------------------------------------------------
    workspace: Path = Field(
        Path("."),
        description="A workspace, or a folder of them: its own store (.a3r/a3r.db) and those of "
        "<workspace>/*/ and <workspace>/campaigns/*/ (where `a3r research` puts each campaign) are shown. "
        "Stores that appear later (a campaign started after the dashboard) are picked up.",
    )
    db: Path | None = Field(None, description="An explicit store file, shown in addition to those found.")
    reports_dir: Path = Field(
        Path("reports"), description="Where the leader writes reports (<reports_dir>/<campaign>/report.html)."
    )
    swarm: tuple[SwarmTarget, ...] = Field((), description="Swarm servers shown on the server page.")
    # -- how it is reached ------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Bind address; anything but loopback needs `token`.")
    port: int = Field(8765, ge=0, le=65535, description="TCP port (0: any free port).")
    token: str | None = Field(
        None,
        min_length=16,
        description="Access token. Required when `host` is not loopback; the browser sends it once as "
        "?token=... and then holds it in an HttpOnly cookie.",
    )
    refresh_s: float = Field(2.0, gt=0.1, le=60, description="How often open pages poll for new data.")

    @model_validator(mode="after")
    def _token_off_loopback(self) -> DashboardConfig:
        if not is_loopback(self.host) and not self.token:
            raise ValueError(
                f"refusing to serve the dashboard on {self.host} without a token: anyone who can reach it "
                "could read every run. Give --token (16+ characters) or bind to 127.0.0.1"
            )
        return self

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)
