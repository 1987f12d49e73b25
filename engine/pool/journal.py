"""The pool journal's file: JSON lines, appended and fsynced in order, replayed at boot, compacted by rewrite.

This module does the blocking file work and nothing else; what the records mean is `engine.pool.pool`'s.
A journal made with `background=True` (the server's) runs every write on one dedicated thread, in the
order the writes were submitted, so an fsync never stalls the event loop that serves requests: the
caller gets a `concurrent.futures.Future` and awaits it (`asyncio.wrap_future`) before it tells a client
that its episode is durable. Without it (tests, tools) each write runs inline and the returned future is
already done. Either way the writes land in submission order, which is what lets the pool mutate its
memory at submission time and still have a journal that replays to the same state.

Replay rules: only newline-terminated lines were ever acknowledged, so an unterminated last line (a crash
mid-append) is cut off, and the file truncated to match so the next append is not glued onto it; any
other line that does not parse is `JournalCorrupt`, never a silent truncation of what follows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engine.errors import JournalCorrupt
from engine.fsutil import atomic_write_text

__all__ = ["PoolJournal"]


class PoolJournal:
    """One journal file and the (optional) thread that writes it."""

    def __init__(self, path: Path, background: bool = False) -> None:
        self.path = path
        # One worker: writes must reach the file in the order they were submitted.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pool-journal") if background else None

    # -- writing --------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> Future[None]:
        """Append one record and fsync it; the future completes once it is on disk."""
        line = json.dumps(record) + "\n"  # serialised now: the caller may mutate the episode later
        return self._submit(lambda: self._append_line(line))

    def rewrite(self, records: list[dict[str, Any]]) -> Future[None]:
        """Replace the whole journal with `records`, atomically (temporary file, fsync, rename, dir fsync)."""
        text = "".join(json.dumps(r) + "\n" for r in records)
        return self._submit(lambda: atomic_write_text(self.path, text))

    def close(self) -> None:
        """Wait for every submitted write, then stop the writer thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _submit(self, work: Callable[[], None]) -> Future[None]:
        if self._executor is not None:
            return self._executor.submit(work)
        done: Future[None] = Future()
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future, like the thread's
            done.set_exception(e)
        else:
            done.set_result(None)
        return done

    def _append_line(self, line: str) -> None:
        data = line.encode("utf-8")
        # Unbuffered: after a failure nothing may be left in a buffer that closing the file would flush.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                # The caller is told this record failed, so it must not come back at replay: cut the file
                # back to what was acknowledged (best effort: if this fails too, the original error stands).
                try:
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)

    # -- reading --------------------------------------------------------------------------------
    def read(self) -> list[dict[str, Any]]:
        """Every acknowledged record, in order (blocking; call it before serving starts)."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        if lines[-1]:
            # An unterminated last line is a crash mid-append: that episode was never acknowledged. Cut it
            # off, or the next append would be glued to it and the journal corrupted from there on.
            with open(self.path, "r+b") as f:
                f.truncate(len(data) - len(lines[-1]))
                os.fsync(f.fileno())
        records = []
        for lineno, line in enumerate(lines[:-1], 1):
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict) or "op" not in rec:
                    raise ValueError("not a journal record")
            except ValueError as e:
                raise self.damaged(lineno, e) from e
            records.append(rec)
        return records

    def damaged(self, lineno: int, cause: Exception) -> JournalCorrupt:
        """The error for a record that cannot be replayed (also used by the pool for records it rejects)."""
        return JournalCorrupt(
            f"pool journal {self.path} line {lineno} is damaged ({type(cause).__name__}: {cause}); only a torn "
            "last line can come from a crash. Move the file away to start with an empty pool."
        )

