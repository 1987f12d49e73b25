"""Where a campaign's numbers came from: engine commit, leader host, Python, store file."""

from __future__ import annotations

import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["collect_provenance", "engine_commit"]


def engine_commit() -> tuple[str, bool]:
    """(commit sha, working tree dirty) of the git checkout holding `engine`, or ("unknown", False)."""
    import engine.config  # a module, not the package: an editable install may expose `engine` as a namespace

    repo = Path(engine.config.__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--", "engine"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    return sha or "unknown", bool(dirty)


def _relative(path: str | Path) -> str:
    """The path relative to the working directory when it lies below it: reports travel between machines."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def collect_provenance(store_path: str | Path, bootstrap_seed: int) -> dict[str, Any]:
    sha, dirty = engine_commit()
    return {
        "engine_commit": sha,
        "engine_dirty": dirty,
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "store": _relative(store_path),
        "bootstrap_seed": bootstrap_seed,
    }
