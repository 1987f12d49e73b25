"""The converted-model cache: where converted built-ins live and how a conversion is made crash- and race-safe.

A conversion (GGUF dequantisation, random tiny weights) is written into a temporary directory next to the
target and renamed into place, so the target directory either does not exist or is complete: a killed
process leaves only a stale temporary directory, never a half-written model. A per-target file lock makes a
second process wait for the first conversion instead of repeating ~20 s of work.

Each entry ends with a manifest (written last, inside the temporary directory) naming the source file's
identity (its size and content hash) and every file's size. An entry whose manifest is missing or disagrees
(the source was upgraded, a file was truncated or deleted, an entry predates manifests) is converted again and
swapped in under the lock. The same source at another path (another clone's virtualenv) is the same entry.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.fsutil import swarm_cache_home

try:  # POSIX only; elsewhere the atomic rename alone keeps the cache consistent.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def cache_root() -> Path:
    """Root of converted models: `models/` in the swarm cache (`engine.fsutil.swarm_cache_home`)."""
    return swarm_cache_home() / "models"


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


MANIFEST = "swarm-cache-manifest.json"


def source_identity(source: Path | None) -> dict | None:
    """What identifies a conversion's source file: its size and the SHA-256 of its content.

    Content, not place: every fresh clone has its own virtualenv, so the same package's GGUF sits at another
    path with another modification time, and a key on those reconverted SmolLM2 (and Gemma 3, ~1.5 min)
    for each clone and then again for the next. Hashing SmolLM2's 98 MB GGUF takes ~0.15 s on 2 cores and is
    remembered per process for the file's (path, inode, size, mtime).
    """
    if source is None:
        return None
    path = Path(source).resolve()
    st = path.stat()
    return {"size": st.st_size, "sha256": _sha256(str(path), st.st_ino, st.st_size, st.st_mtime_ns)}


@functools.lru_cache(maxsize=64)
def _sha256(path: str, inode: int, size: int, mtime_ns: int) -> str:  # all but path only key the memo
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _sizes(root: Path) -> dict[str, int]:
    return {
        str(f.relative_to(root)): f.stat().st_size
        for f in sorted(root.rglob("*"))
        if f.is_file() and f.name != MANIFEST
    }


def is_complete(target: Path, source: Path | None = None) -> bool:
    """Whether `target` is a finished conversion of `source` (None: no source file) with every file at the
    size it was written with."""
    try:
        manifest = json.loads((target / MANIFEST).read_text())
        if manifest.get("source") != source_identity(source):
            return False
        return all((target / name).stat().st_size == size for name, size in manifest["files"].items())
    except (OSError, ValueError, KeyError, AttributeError):
        return False


def convert_once(target: Path, build: Callable[[Path], None], source: Path | None = None) -> Path:
    """Return `target`, creating it first with `build(tmp_dir)` unless it is a complete conversion of
    `source` (see `is_complete`); an incomplete or stale entry is rebuilt and replaced.

    `build` writes a complete model directory into the empty directory it is given. Concurrent callers
    (threads or processes) for the same target run `build` at most once between them.
    """
    if is_complete(target, source):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if is_complete(target, source):  # another process finished while we waited for the lock
            return target
        # Under the lock nobody else is converting this target, so leftovers are from crashed runs.
        for stale in target.parent.glob(f".{target.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            build(tmp)
            # Written last: a manifest vouches only for files that were all there before it.
            manifest = {"source": source_identity(source), "files": _sizes(tmp)}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            _swap_in(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _swap_in(tmp: Path, target: Path) -> None:
    """Rename `tmp` to `target`, first moving a stale `target` aside (a directory cannot be renamed over a
    non-empty one) under a temporary name that a crash leaves for the next conversion to clean up."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.tmp-old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        # Without flock (non-POSIX) a racing process may have renamed first; its copy is complete.
        if not target.is_dir():
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
