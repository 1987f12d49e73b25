"""Settling asyncio futures from another thread: what both inference engines need for pause/resume.

An engine is shared by callers on any event loop (the server's, a test's) and does its bookkeeping under a
thread lock, sometimes on its own compute thread. A waiter is a future on the caller's loop; it is woken
with `call_soon_threadsafe`, and a loop that has closed since (its caller gave up) is skipped.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["Waiters", "post", "settle"]


def settle(fut: asyncio.Future, result: Any = None, error: BaseException | None = None) -> None:
    """Complete `fut` with `result` or `error` unless it is already done (run it on the future's loop)."""
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


def post(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Run `fn(*args)` on `loop` from any thread; nothing when the loop is closed (nobody waits any more)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


class Waiters:
    """Futures of callers waiting for one event (idle, resumed). Not locked: guard it with the engine's lock."""

    def __init__(self) -> None:
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    def add(self) -> asyncio.Future:
        """A new future on the running loop, woken by `wake(take())`; await it outside the lock."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiting.append((loop, fut))
        return fut

    def take(self) -> list[tuple[asyncio.AbstractEventLoop, asyncio.Future]]:
        """Remove and return every waiter (under the lock), to wake them with `wake` after releasing it."""
        out, self._waiting = self._waiting, []
        return out

    @staticmethod
    def wake(taken: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]]) -> None:
        for loop, fut in taken:
            post(loop, settle, fut)
