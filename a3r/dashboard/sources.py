"""The stores the dashboard reads: found under the workspace folder, opened read-only, re-discovered so a
campaign started after the dashboard appears without a restart.

A source is one store file, named by its workspace's path relative to the dashboard's workspace ("." for
the workspace itself). That name is only ever used as a key into the discovered set, never as a path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from a3r.api import DB_RELPATH
from a3r.config import CONFIG_FILE, SchedulerConfig, WorkspaceConfig
from a3r.exceptions import A3RError, NotFound
from a3r.store import Store

__all__ = ["SeriesCache", "Source", "Sources"]

_REDISCOVER_S = 2.0  # at most this often the folders are listed again


class SeriesCache:
    """Points of a metric per run, kept between polls and extended with only the points logged since, the
    same contract as the live charts: a run whose attempt count changed is read again from the start,
    since a retry may log earlier steps again. Shared by the request threads of one store."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], tuple[int, list[tuple[int, float | None]]]] = {}
        self._lock = threading.Lock()

    def get(
        self, store: Store, name: str, attempts: Mapping[int, int]
    ) -> dict[int, list[tuple[int, float | None]]]:
        """run id -> every (step, value) of metric `name`, for runs with the given attempt counts."""
        with self._lock:
            since: dict[int, int | None] = {}
            for rid, n in attempts.items():
                held = self._held.get((name, rid))
                if held is None or held[0] != n:
                    held = self._held[(name, rid)] = (n, [])
                since[rid] = held[1][-1][0] if held[1] else None
            for rid, new in store.metric_series_since(name, since).items():
                self._held[(name, rid)][1].extend(new)
            return {rid: list(self._held[(name, rid)][1]) for rid in attempts}


@dataclass
class Source:
    key: str  # workspace path relative to the dashboard's workspace, "." for itself
    db_path: Path
    store: Store | None  # None when the file could not be opened (see `error`)
    error: str = ""
    stale_after_s: float = SchedulerConfig().stale_after  # heartbeat silence the monitor calls stale
    series: SeriesCache = field(default_factory=SeriesCache)  # the run table's primary-metric points
    # metric names of runs in a final state (they log nothing more), so a poll asks only live runs again
    final_metric_names: dict[int, list[str]] = field(default_factory=dict)


class Sources:
    """Every store under `workspace` (its own, `*/` and `campaigns/*/`), plus `db` if given."""

    def __init__(self, workspace: Path, db: Path | None = None):
        self.root = Path(workspace).resolve()
        self.db = Path(db).resolve() if db else None
        self._sources: dict[str, Source] = {}
        self._listed_at = 0.0
        self._lock = threading.Lock()

    def _candidates(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        if self.db is not None and self.db.exists():
            found["."] = self.db
        for ws in [self.root, *sorted(self.root.glob("*")), *sorted(self.root.glob("campaigns/*"))]:
            db = ws / DB_RELPATH
            if db.is_file():
                key = ws.relative_to(self.root).as_posix() or "."
                found.setdefault(key, db)
        return found

    def all(self) -> list[Source]:
        """Every source, rediscovering the folders when the last listing is older than a moment."""
        with self._lock:
            if time.monotonic() - self._listed_at > _REDISCOVER_S:
                for key, db in self._candidates().items():
                    known = self._sources.get(key)
                    if known is None or (known.store is None and known.db_path == db):
                        self._sources[key] = self._open(key, db)
                self._listed_at = time.monotonic()
            return list(self._sources.values())

    def get(self, key: str) -> Source:
        """The readable source `key`; `NotFound` if there is none by that name or it failed to open."""
        for src in self.all():
            if src.key == key:
                if src.store is None:
                    raise NotFound(f"workspace {key!r} cannot be read: {src.error}")
                return src
        raise NotFound(f"no workspace {key!r} under {self.root}")

    @staticmethod
    def _open(key: str, db: Path) -> Source:
        try:
            store = Store(db, read_only=True, busy_timeout_s=5.0)
        except (A3RError, OSError, SQLAlchemyError) as e:
            return Source(key, db, None, str(e))
        src = Source(key, db, store)
        cfg = db.parent.parent / CONFIG_FILE  # <workspace>/a3r.yaml beside <workspace>/.a3r/a3r.db
        try:
            src.stale_after_s = WorkspaceConfig.load(cfg).scheduler.stale_after
        except (A3RError, OSError, ValueError):
            pass  # no or unreadable a3r.yaml: keep the default
        return src

    def close(self) -> None:
        with self._lock:
            for src in self._sources.values():
                if src.store is not None:
                    src.store.close()
            self._sources.clear()
