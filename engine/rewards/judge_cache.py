"""Past judge grades in SQLite, keyed by what determines a grade: the whole chat the judge sees (its
instructions, graded examples, rubric, prompt and reply), the judge model and the scale. A repeated reply
(RL samples the same short answer often) is graded once; a changed rubric, example or instruction is a
new key, so a grade given under other instructions is never reused.

Only parsed scores are stored; a fallback is never cached, so a judge that was down is asked again later.
The key does not hold the endpoint: two endpoints serving the same model name share grades, so give a
judge whose weights change (a judge server that trains) its own cache file or none.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

__all__ = ["JudgeCache", "grade_key"]


def grade_key(messages: list[dict[str, str]], model: str, scale: tuple[int, int]) -> str:
    """The cache key of one grade: a SHA-256 over its inputs, unambiguous for any text (JSON-encoded)."""
    raw = json.dumps([messages, model, list(scale)], ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


class JudgeCache:
    """A thread-safe SQLite map key -> score; `path=None` keeps it in memory for this process."""

    def __init__(self, path: str | Path | None = None) -> None:
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(":memory:" if path is None else str(path), check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        with self._lock, self._db:
            if path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS grades (key TEXT PRIMARY KEY, score REAL NOT NULL)")

    def get(self, key: str) -> float | None:
        with self._lock:
            row = self._db.execute("SELECT score FROM grades WHERE key = ?", (key,)).fetchone()
        return None if row is None else float(row[0])

    def put(self, key: str, score: float) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO grades (key, score) VALUES (?, ?)", (key, score))

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM grades").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
