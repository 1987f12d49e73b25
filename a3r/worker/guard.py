"""Job-group guard: the leader of a job's process group, so the whole job dies with its worker.

PR_SET_PDEATHSIG only reaches a worker's direct child; `run.sh` (bash) would die but the training
process it started would live on as an orphan, racing the retry for the checkpoint directory. So the
worker starts this guard instead (as a file, with `python -S`: stdlib only, ~15 ms), with SIGUSR1 as
its parent-death signal. The guard runs the real command in its own process group and:
- on SIGUSR1 (the worker died): SIGKILLs the whole group, itself included;
- on SIGTERM/SIGINT/SIGHUP (the worker stopping the job, sent to the whole group): does nothing, so the
  job gets its grace period to checkpoint and exit;
- when the command exits: exits the same way (same code, or the same signal).
"""

import os
import signal
import subprocess
import sys


def main() -> None:
    signal.signal(signal.SIGUSR1, lambda *_: os.killpg(0, signal.SIGKILL))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    # the child must not inherit the ignored dispositions: restore defaults in it before exec
    child = subprocess.Popen(sys.argv[1:], restore_signals=True, preexec_fn=_defaults)
    rc = child.wait()
    if rc < 0:
        if -rc not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be (and need not be) reset
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    sys.exit(rc)


def _defaults() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)


if __name__ == "__main__":
    main()
