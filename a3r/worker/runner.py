"""The worker: runs one attempt's job as a subprocess, heartbeats, streams metrics, records the outcome.

`a3r worker run <run-id> --attempt-dir DIR` runs this inside the attempt's tmux pane, so the pane shows
the job's output live; tmux is only the container and viewer. The worker:

1. claims the attempt (dispatched -> running, fenced: it refuses to start a job for an attempt that was
   cancelled or declared stale meanwhile);
2. starts `run.sh` under a guard (`a3r.worker.guard`) that leads the job's own process group (so the
   whole job tree can be killed at once) and dies with the worker (PR_SET_PDEATHSIG), taking the group
   along, so a SIGKILLed worker leaves no orphan racing the retry for the checkpoint directory;
3. every heartbeat: writes heartbeat.json, heartbeats the store (a refusal means the attempt is no longer
   ours: kill the job and leave), tails A3R_METRICS_FILE into the store;
4. kills the job at the wall-time budget (SIGTERM, then SIGKILL after `kill_grace_s`);
5. when the job ends: kills stray processes left in its group, classifies a failure from the exit status
   and log tail, audits the training history of a job that succeeded (`engine.training.audit` over its
   run dir; a history that fails it fails the attempt), writes result.json, then records the result.

SIGHUP (pane closed) and SIGTERM make it stop the job and record an infrastructure failure; Ctrl-C in an
attached pane is ignored (the pane is a viewer; `a3r cancel` stops a run).
Exit status: 0 result recorded, 2 bad spec, 3 attempt not ours (fenced), 1 unexpected error.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from a3r.states import AttemptState, FailureKind
from a3r.worker.classify import classify_failure
from a3r.worker.files import HEARTBEAT_FILE, LOG_FILE, METRICS_FILE, RESULT_FILE, write_json_atomic
from a3r.worker.metrics import read_metrics
from a3r.worker.sinks import Sink
from a3r.worker.spec import AttemptSpec

__all__ = ["EXIT_FENCED", "EXIT_OK", "Worker", "tail_lines"]

EXIT_OK, EXIT_ERROR, EXIT_BAD_SPEC, EXIT_FENCED = 0, 1, 2, 3
_PR_SET_PDEATHSIG = 1
_GUARD = str(Path(__file__).with_name("guard.py"))
AUDIT_FILE = "audit.json"  # the training-history audit of a finished job's run dir


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: signal the guard (SIGUSR1) when the worker dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
    except (OSError, AttributeError):  # not Linux: the monitor's fence still kills the group
        return
    if os.getppid() != parent_pid:  # the worker died before prctl took effect
        os._exit(1)


def tail_lines(path: str | Path, n: int, max_bytes: int = 64 << 10) -> str:
    """The last `n` lines of a text file (binary junk replaced), reading at most `max_bytes`."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-n:])


@dataclass
class _Outcome:
    kind: str  # "exited" | "timed_out" | "interrupted" | "fenced"
    exit_code: int | None = None
    detail: str = ""


class Worker:
    """Supervises one attempt. Construct with the spec and a sink, then call `run()` from the main thread."""

    def __init__(self, spec: AttemptSpec, sink: Sink, *, out: TextIO | None = None):
        self.spec = spec
        self.sink = sink
        self.out = out if out is not None else sys.stdout
        self.dir = Path(spec.attempt_dir)
        self._signal: str | None = None
        self._seq = 0
        self._offset = 0
        self._saw_nan = False
        self._last_step: int | None = None
        self._pgid: int | None = None
        self._pane_ok = True

    # -- reporting ----------------------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        if not self._pane_ok:
            return
        try:
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()
        except (OSError, ValueError, RuntimeError):  # pane closed (EIO), or a reentrant write from a signal
            self._pane_ok = False

    def _write_heartbeat(self, state: str) -> None:
        write_json_atomic(
            self.dir / HEARTBEAT_FILE,
            {
                "seq": self._seq,
                "ts": time.time(),
                "state": state,
                "worker_pid": os.getpid(),
                "job_pgid": self._pgid,
                "step": self._last_step,
                "attempt_id": self.spec.attempt_id,
            },
        )

    def _tail_metrics(self, final: bool = False) -> None:
        chunk = read_metrics(self.dir / METRICS_FILE, self._offset, final=final)
        self._saw_nan |= chunk.saw_nan
        if chunk.last_step is not None:
            self._last_step = max(self._last_step or 0, chunk.last_step)
        if chunk.new_offset != self._offset or chunk.points:
            self._offset = self.sink.metrics(chunk, self._offset)

    # -- job control --------------------------------------------------------------------------------------
    def _start_job(self) -> subprocess.Popen:
        env = self.spec.job_env()
        # the job sees the worker's Python environment first (console scripts such as `swarm`)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        parent = os.getpid()
        job = subprocess.Popen(
            [sys.executable, "-S", _GUARD, *self.spec.command],
            cwd=self.spec.run_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: killpg reaches the whole job tree
            preexec_fn=lambda: _die_with_parent(parent),  # the guard takes the group down with us
        )
        self._pgid = job.pid
        return job

    def _pump(self, job: subprocess.Popen, log: Path) -> None:
        with open(log, "ab", buffering=0) as f:
            for line in iter(job.stdout.readline, b""):
                f.write(line)
                self._say(line.decode("utf-8", "replace").rstrip("\n"))

    def _killpg(self, sig: int) -> None:
        if self._pgid is not None:
            try:
                os.killpg(self._pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _stop(self, job: subprocess.Popen) -> int | None:
        """SIGTERM the job's group, SIGKILL it after the grace period; returns the exit code."""
        self._killpg(signal.SIGTERM)
        try:
            return job.wait(timeout=self.spec.kill_grace_s)
        except subprocess.TimeoutExpired:
            self._killpg(signal.SIGKILL)
            return job.wait()

    def _on_signal(self, signum: int, _frame) -> None:
        self._signal = signal.Signals(signum).name

    def _supervise(self, job: subprocess.Popen) -> _Outcome:
        hb = self.spec.heartbeat_s
        start = time.monotonic()
        deadline = start + self.spec.wall_time_s
        next_hb = start
        while True:
            if self._signal:
                return _Outcome("interrupted", self._stop(job), f"worker received {self._signal}")
            now = time.monotonic()
            if now >= next_hb:
                self._seq += 1
                self._write_heartbeat("running")
                if not self.sink.heartbeat(self._seq, self._pgid):
                    return _Outcome("fenced", self._stop(job), "attempt is no longer active in the store")
                self._tail_metrics()
                next_hb = max(next_hb + hb, now + hb / 2)
            if now >= deadline:
                return _Outcome(
                    "timed_out", self._stop(job), f"wall-time budget {self.spec.wall_time_s:g} s exceeded"
                )
            try:
                # short waits keep signal handling and heartbeats prompt; Popen.wait polls every <= 50 ms
                rc = job.wait(timeout=max(0.01, min(next_hb, deadline, now + 0.5) - now))
                if self._signal:  # we were being stopped while it died: the death is part of that
                    return _Outcome("interrupted", rc, f"worker received {self._signal}")
                return _Outcome("exited", rc)
            except subprocess.TimeoutExpired:
                continue

    # -- main ---------------------------------------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # someone attached to the pane pressed Ctrl-C: the pane is a viewer, stopping is `a3r cancel`
        signal.signal(
            signal.SIGINT,
            lambda *_: self._say(f"[a3r] Ctrl-C ignored; stop this run with `a3r cancel {self.spec.run_id}`"),
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        spec = self.spec
        if not self.sink.start(os.getpid()):
            self._write_heartbeat("fenced")
            self._say(
                f"[a3r] attempt {spec.attempt_id} of run {spec.run_id} is no longer dispatched; not starting"
            )
            return EXIT_FENCED
        log = self.dir / LOG_FILE
        self._say(
            f"[a3r] run {spec.run_id} attempt {spec.attempt_number}: {' '.join(spec.command)} in {spec.run_dir}"
        )
        try:
            job = self._start_job()
        except OSError as e:
            reason = f"cannot start job {spec.command}: {e}"
            self._record(AttemptState.FAILED, None, FailureKind.INFRASTRUCTURE.value, reason, reason)
            return EXIT_OK
        pump = threading.Thread(target=self._pump, args=(job, log), daemon=True)
        pump.start()
        try:
            outcome = self._supervise(job)
        finally:
            self._killpg(signal.SIGKILL)  # strays left in the group by the job (or us failing) die here
            if job.poll() is None:
                job.wait()
        pump.join(timeout=2.0)
        return self._finish(outcome)

    def _finish(self, o: _Outcome) -> int:
        self._tail_metrics(final=True)
        tail = tail_lines(self.dir / LOG_FILE, self.spec.log_tail_lines)
        if o.kind == "fenced":
            self._write_heartbeat("fenced")
            self._say(f"[a3r] {o.detail}; job stopped")
            return EXIT_FENCED
        if o.kind == "interrupted":
            state, kind = AttemptState.FAILED, FailureKind.INFRASTRUCTURE
        elif o.kind == "timed_out":
            state, kind = AttemptState.TIMED_OUT, FailureKind.TIMEOUT
        else:
            kind = classify_failure(o.exit_code, tail, saw_nan=self._saw_nan)
            state = AttemptState.SUCCEEDED if kind is None else AttemptState.FAILED
            o.detail = f"job exited with status {o.exit_code}" + (f" ({kind.value})" if kind else "")
            broken = self._history_violations() if kind is None else []
            if broken:
                # A finished run whose training history does not hold (a batch trained twice, an evaluation
                # cut short) must not count: its scores come from data other than the design's.
                state, kind = AttemptState.FAILED, FailureKind.CODE_ERROR
                o.detail = f"job exited with status 0 but its training history fails the audit: {'; '.join(broken[:5])}"
        self._record(state, o.exit_code, kind.value if kind else None, o.detail, tail)
        return EXIT_OK

    def _history_violations(self) -> list[str]:
        """The engine's audit over the job's run dir (`swarm train --run-dir $A3R_CHECKPOINT_DIR`); written
        to audit.json beside the result. Nothing to audit (no engine run dir there): no violations."""
        from engine.training.audit import audit_run_dir

        try:
            report = audit_run_dir(self.spec.checkpoint_dir)
        except FileNotFoundError:
            return []
        write_json_atomic(self.dir / AUDIT_FILE, report.as_dict())
        return report.violations

    def _record(
        self, state: AttemptState, exit_code: int | None, kind: str | None, reason: str, tail: str
    ) -> None:
        # file first: if we die before the store write, the monitor still finds the result
        write_json_atomic(
            self.dir / RESULT_FILE,
            {
                "attempt_id": self.spec.attempt_id,
                "state": state.value,
                "exit_code": exit_code,
                "failure_kind": kind,
                "reason": reason,
                "log_tail": tail,
                "ended_at": time.time(),
            },
        )
        self._write_heartbeat("exited")
        recorded = self.sink.finish(
            state.value, exit_code=exit_code, failure_kind=kind, reason=reason, log_tail=tail
        )
        note = "" if recorded else " (not recorded: the attempt was already closed)"
        self._say(f"[a3r] attempt {self.spec.attempt_number} {state.value}: {reason}{note}")
