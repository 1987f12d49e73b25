"""Hosts: where attempts run. Local (libtmux) and ssh (tmux on the remote side), one socket per campaign."""

from __future__ import annotations

import hashlib
from pathlib import Path

from a3r.config import HostSpec, WorkspaceConfig
from a3r.hosts.base import AttemptFiles, HostBackend, ProbeReport, ProbeRequest, SessionInfo
from a3r.hosts.local import LocalHost
from a3r.hosts.ssh import SshHost

__all__ = [
    "AttemptFiles",
    "HostBackend",
    "LocalHost",
    "ProbeReport",
    "ProbeRequest",
    "SessionInfo",
    "SshHost",
    "build_hosts",
    "workspace_key",
]


def workspace_key(workspace: Path) -> str:
    """Short stable id of a workspace path: names its tmux socket and its directory on ssh hosts."""
    return hashlib.sha1(str(Path(workspace).resolve()).encode()).hexdigest()[:10]


def build_hosts(config: WorkspaceConfig, workspace: Path, db_path: Path) -> dict[str, HostBackend]:
    """One backend per inventory host, in inventory order (the scheduler fills slots in this order).

    The socket is `a3r-<workspace key>` (or `tmux_socket`); ssh hosts append their name so that a
    loopback "remote" host never shares a tmux server with the local one.
    """
    key = workspace_key(workspace)
    socket = config.tmux_socket or f"a3r-{key}"
    out: dict[str, HostBackend] = {}
    for spec in config.hosts:
        out[spec.name] = _build(spec, socket, key, workspace, db_path)
    return out


def _build(spec: HostSpec, socket: str, key: str, workspace: Path, db_path: Path) -> HostBackend:
    if spec.kind == "local":
        return LocalHost(spec, socket=socket, workspace=workspace, db_path=db_path)
    return SshHost(spec, socket=f"{socket}-{spec.name}", workspace_key=key)
