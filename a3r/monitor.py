"""The monitor: the long-running process that ticks the scheduler (`a3r monitor`).

It holds the store's scheduler lease so two monitors never dispatch at once; a monitor that was
SIGKILLed on this machine is replaced at once (its pid is gone), one on another machine after the lease
TTL. Killing the monitor loses nothing: workers keep running and writing to the store, and the next
monitor's first tick picks up whatever the last one left half done (see `a3r.scheduler`).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TextIO

from sqlalchemy.exc import OperationalError

from a3r.scheduler import Scheduler, TickReport
from a3r.states import RunState
from a3r.store import Store

__all__ = ["Monitor"]


class Monitor:
    def __init__(self, store: Store, scheduler: Scheduler, *, out: TextIO | None = None):
        self.store = store
        self.scheduler = scheduler
        self.config = scheduler.config
        self.out = out if out is not None else sys.stdout
        self.stop_event = threading.Event()

    def _log(self, rep: TickReport) -> None:
        parts = []
        if rep.dispatched:
            parts.append(f"dispatched runs {rep.dispatched}")
        for aid, why in rep.lost:
            parts.append(f"attempt {aid} stale: {why}")
        if rep.settled:
            parts.append("settled " + ", ".join(f"run {r} -> {s}" for r, s in rep.settled))
        if rep.reaped:
            parts.append(f"reaped {rep.reaped}")
        if parts:
            stamp = time.strftime("%H:%M:%S")
            try:
                self.out.write(f"[{stamp}] " + "; ".join(parts) + "\n")
                self.out.flush()
            except (OSError, ValueError):
                pass

    def idle(self) -> bool:
        """No run is pending, dispatched or running."""
        live = [RunState.PENDING, RunState.DISPATCHED, RunState.RUNNING]
        return not self.store.runs(states=live)

    def run(
        self, *, exit_when_idle: bool = False, max_ticks: int | None = None, handle_signals: bool = True
    ) -> int:
        """Tick until stopped (SIGTERM/SIGINT or `stop_event`), idle (if asked) or `max_ticks`.

        Returns 0 on a clean stop, 2 if another monitor took over the lease.
        """
        self.store.acquire_lease(ttl_s=self.config.lease_ttl)
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop_event.set())
        ticks, code = 0, 0
        try:
            while not self.stop_event.is_set():
                t0 = time.monotonic()
                try:
                    self._log(self.scheduler.tick())
                except OperationalError as e:
                    # the store stayed locked past busy_timeout (or the disk hiccuped): every step is
                    # fenced and resumable, so the next tick simply carries on
                    self.out.write(f"[a3r] tick skipped, store unavailable: {e}\n")
                ticks += 1
                if not self.store.renew_lease():
                    self.out.write("[a3r] another monitor took the lease; stopping\n")
                    code = 2
                    break
                if (max_ticks is not None and ticks >= max_ticks) or (exit_when_idle and self.idle()):
                    break
                self.stop_event.wait(max(0.0, self.config.tick - (time.monotonic() - t0)))
        finally:
            if code == 0:
                self.store.release_lease()
        return code
