"""Run client code in a subprocess with a wall-clock timeout and an address-space limit.

Client code is untrusted in the sense of "may be broken": an import that allocates without bound, a loop
that never ends, or a crash must become a flag in the report, never hang or kill `vibe check`. This is
not a security boundary (the code runs as the user, with the user's files and network).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxResult", "run_sandboxed", "tail"]


@dataclass(frozen=True)
class SandboxResult:
    returncode: int | None  # None: killed at the timeout
    result: dict | None  # the JSON the child wrote to its result file, when it got that far
    log_tail: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _limit(memory_mb: int):
    def apply() -> None:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.setsid()  # its own process group, so the timeout kills its children too

    return apply


def run_sandboxed(
    module: str, args: list[str], *, cwd: Path, result_file: Path, timeout_s: float, memory_mb: int
) -> SandboxResult:
    """`python -m module *args` under the limits; the child writes its JSON answer to `result_file`."""
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", module, *args, "--result", str(result_file)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=_limit(memory_mb),
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        code = None
    result = None
    if result_file.is_file():
        try:
            result = json.loads(result_file.read_text())
        except ValueError:
            result = None
    return SandboxResult(code, result, tail(out or ""))
