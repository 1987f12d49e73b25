"""Classify a failed attempt from its exit status, log tail and metrics.

Rules, first match wins (the order encodes which evidence is most specific):
1. the worker killed the job at its wall-time budget           -> timeout
2. the log tail matches an out-of-memory pattern               -> oom
3. the log tail matches a NaN/divergence pattern, or the job
   logged a NaN/inf metric before failing                      -> nan_divergence
4. the log tail matches an infrastructure pattern (network,
   NCCL, disk, hardware)                                       -> infrastructure
5. killed by SIGKILL (exit -9 or 137) with no other evidence   -> oom (the kernel OOM killer is by far the
                                                                  most common sender on training hosts)
6. killed by SIGHUP, SIGTERM or SIGINT (someone stopped it)    -> infrastructure
7. any other non-zero exit                                     -> code_error

Patterns live in one ordered table (`PATTERNS`) so new known failures are one line; the table is the
documentation. A successful exit (0) is never classified.
"""

from __future__ import annotations

import re
import signal

from a3r.states import FailureKind

__all__ = ["PATTERNS", "classify_failure"]

PATTERNS: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (
        FailureKind.OOM,
        re.compile(
            r"out of memory|OutOfMemoryError|\bMemoryError\b|Cannot allocate memory|oom[- _]?kill|"
            r"std::bad_alloc|CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED",
            re.IGNORECASE,
        ),
    ),
    (
        FailureKind.NAN_DIVERGENCE,
        re.compile(
            r"\bnan\b|non-finite|not finite|diverge|FloatingPointError|\binf(inity)? loss", re.IGNORECASE
        ),
    ),
    (
        FailureKind.INFRASTRUCTURE,
        re.compile(
            r"NCCL (error|WARN.*timeout)|Connection (refused|reset|timed out)|Broken pipe|No space left on device|"
            r"Address already in use|Network is unreachable|No route to host|ECC error|Input/output error|"
            r"Stale file handle|Too many open files|Temporary failure in name resolution|CUDA driver",
            re.IGNORECASE,
        ),
    ),
)

_STOP_SIGNALS = {signal.SIGHUP, signal.SIGTERM, signal.SIGINT}


def _signal_of(exit_code: int) -> int | None:
    """Signal number from a Popen return code (-N) or a shell's 128+N."""
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 128 + 65:
        return exit_code - 128
    return None


def classify_failure(
    exit_code: int | None, log_tail: str, *, timed_out: bool = False, saw_nan: bool = False
) -> FailureKind | None:
    """The failure kind of an attempt, or None if it succeeded (exit 0 and not timed out)."""
    if timed_out:
        return FailureKind.TIMEOUT
    if exit_code == 0:
        return None
    for kind, pattern in PATTERNS:
        if kind is FailureKind.NAN_DIVERGENCE and saw_nan:
            return kind
        if pattern.search(log_tail):
            return kind
    sig = _signal_of(exit_code) if exit_code is not None else None
    if sig == signal.SIGKILL:
        return FailureKind.OOM
    if sig in _STOP_SIGNALS or exit_code is None:
        return FailureKind.INFRASTRUCTURE
    return FailureKind.CODE_ERROR
