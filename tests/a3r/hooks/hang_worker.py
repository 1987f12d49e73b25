"""Stand-in Python for a test host (HostSpec.python): runs `python -m a3r ...` unchanged, except that a
worker running attempt number 1 hangs after its first heartbeat, like a deadlocked worker: its pane
stays alive, its job keeps running, its heartbeats stop. (SIGSTOP cannot fake this: tmux resumes stopped
panes.) Used by tests/a3r/test_scheduler.py and benchmarks/a3r_scheduler.py."""

import runpy
import sys
import time

assert sys.argv[1:3] == ["-m", "a3r"], sys.argv
sys.argv = ["a3r", *sys.argv[3:]]

if "worker" in sys.argv and "--attempt-dir" in sys.argv:
    from a3r.worker import sinks
    from a3r.worker.spec import AttemptSpec

    spec = AttemptSpec.read(sys.argv[sys.argv.index("--attempt-dir") + 1])
    if spec.attempt_number == 1:
        _heartbeat = sinks.StoreSink.heartbeat

        def heartbeat(self, seq, job_pgid):
            if seq >= 2:
                time.sleep(3600)
            return _heartbeat(self, seq, job_pgid)

        sinks.StoreSink.heartbeat = heartbeat

runpy.run_module("a3r", run_name="__main__", alter_sys=True)
