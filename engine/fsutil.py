"""Crash-safe file replacement, shared by the pool journal and the metrics log, and a log file's tail for
error messages."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write_text", "fsync_dir", "log_tail", "swarm_cache_home"]


def atomic_write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves either the old file or the new one, whole.

    Written to a temporary sibling, fsynced, renamed over `path`, then the directory fsynced (so the
    rename itself survives a crash).
    """
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def log_tail(path: Path, n: int = 4000) -> str:
    """The last `n` bytes of a subprocess's log as text, for an error message ("(no log)" if unreadable)."""
    try:
        return Path(path).read_bytes()[-n:].decode(errors="replace")
    except OSError:
        return "(no log)"


def swarm_cache_home() -> Path:
    """The swarm cache (converted models, step-0 evaluations): `$SWARM_CACHE_DIR`, else
    `${XDG_CACHE_HOME:-~/.cache}/swarm`."""
    env = os.environ.get("SWARM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "swarm"
