"""The converted-model cache: where converted built-ins live and how a conversion is made crash- and race-safe.

A conversion (GGUF dequantisation, random tiny weights) is written into a temporary directory next to the
target and renamed into place, so the target directory either does not exist or is complete: a killed
process leaves only a stale temporary directory, never a half-written model. A per-target file lock makes a
second process wait for the first conversion instead of repeating ~20 s of work.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

try:  # POSIX only; elsewhere the atomic rename alone keeps the cache consistent.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def cache_root() -> Path:
    """Root of converted models: `$SWARM_CACHE_DIR/models`, else `${XDG_CACHE_HOME:-~/.cache}/swarm/models`."""
    env = os.environ.get("SWARM_CACHE_DIR")
    if env:
        return Path(env).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "swarm" / "models"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def convert_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Return `target`, creating it first with `build(tmp_dir)` unless it already exists.

    `build` writes a complete model directory into the empty directory it is given. Concurrent callers
    (threads or processes) for the same target run `build` at most once between them.
    """
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if target.is_dir():  # another process finished while we waited for the lock
            return target
        # Under the lock nobody else is converting this target, so leftovers are from crashed runs.
        for stale in target.parent.glob(f".{target.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            build(tmp)
            try:
                os.rename(tmp, target)
            except OSError:
                # Without flock (non-POSIX) a racing process may have renamed first; its copy is complete.
                if not target.is_dir():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target
