"""Run client code in a bubblewrap sandbox: its own network, user, pid and mount namespaces.

Users run LLM-written code here, so every execution of a client's files (`vibe.children`) goes through
`run_sandboxed`, which starts `python -m vibe.children.<name>` under `bwrap` (Debian's bubblewrap, the
tool Flatpak uses) with:

- no network: a fresh network namespace holds only its own loopback; the swarm server is reached through
  a unix socket `vibe.netbridge` forwards, so the client sees the server at its usual loopback URL and
  nothing else;
- a read-only view of what Python needs (/usr, the interpreter, the project's and the venv's code) and
  nothing more of the host: no /etc/passwd, no home, an empty /tmp; writes only in the client's folder
  (its .vibe/ state is read-only but for the child's own scratch folder) and the folders the caller names;
- user `nobody` (uid 65534) in its own user namespace with every capability dropped, a new session, and
  killed with its whole pid namespace when the parent dies or the wall-clock limit passes;
- rlimits: address space (`memory_mb`), CPU seconds, processes (a fork bomb hits the limit), file size.

Inside the user namespace, nobody maps to the user who ran vibe, so files the client writes in its folder
belong to that user. Where bwrap is missing or cannot make namespaces, `sandbox_unavailable()` says why
and `vibe check` refuses to call the client checked.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["INSTALL_HINT", "SandboxLimits", "SandboxResult", "extra_access", "run_sandboxed", "sandbox_unavailable",
           "tail"]

INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap`, or `make setup` as root)"
NOBODY = 65534
# system folders Python and its C extensions read; bound read-only when they exist (merged-/usr symlinks
# like /bin -> usr/bin are recreated as symlinks)
SYSTEM_PATHS = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc/ld.so.cache", "/etc/alternatives",
                "/etc/localtime", "/etc/ssl/certs")
SCRATCH = "sandbox"  # in the client's .vibe/: the one state folder a child may write (its result file)


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandboxed child may use."""

    timeout_s: float  # wall clock, then the whole pid namespace is killed
    memory_mb: int  # address space
    processes: int = 256  # RLIMIT_NPROC: threads count too (torch and the OpenAI SDK start a few dozen)
    file_mb: int = 1024  # largest file it may write

    @property
    def cpu_s(self) -> int:
        # CPU seconds: the wall limit times the cores, so a busy-looping child dies even if the wall timer
        # is delayed on a loaded machine
        return int(self.timeout_s * max(1, os.cpu_count() or 1)) + 1


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


@functools.cache
def sandbox_unavailable() -> str | None:
    """None when bwrap can build the sandbox here; else why not and how to fix it."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return f"bubblewrap (bwrap) is not installed; {INSTALL_HINT}"
    probe = subprocess.run([bwrap, *_namespace_args(), "--ro-bind", "/", "/", "true"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return (f"bwrap cannot create namespaces here ({probe.stderr.strip() or probe.returncode}); "
                "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run in a "
                "container that permits them")
    return None


def _namespace_args() -> list[str]:
    return ["--unshare-user", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "vibe-sandbox",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def _code_paths() -> list[Path]:
    """What the child's interpreter imports from: the interpreter, the venv, this project, sys.path."""
    project = Path(__file__).resolve().parents[1]
    paths = [Path(sys.base_prefix), Path(sys.prefix), project]
    paths += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths += [Path(p) for p in sys.path if p and Path(p).is_dir()]
    return [p.resolve() for p in paths if p.exists()]


def bwrap_command(argv: Sequence[str], *, root: Path, writable: Sequence[Path], readable: Sequence[Path],
                  scratch: Path) -> list[str]:
    """The bwrap command line running `argv` in the sandbox of client folder `root`."""
    cmd = ["bwrap", *_namespace_args(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for p in SYSTEM_PATHS:
        if os.path.islink(p):
            cmd += ["--symlink", os.readlink(p), p]
        elif os.path.exists(p):
            cmd += ["--ro-bind", p, p]
    for p in dict.fromkeys(_code_paths()):
        cmd += ["--ro-bind", str(p), str(p)]
    for p in readable:
        cmd += ["--ro-bind", str(p), str(p)]
    cmd += ["--bind", str(root), str(root)]
    state = root / ".vibe"
    if state.is_dir():  # reports and tokens: the client may not forge or read-modify them
        cmd += ["--ro-bind", str(state), str(state)]
    for p in (*writable, scratch):
        cmd += ["--bind", str(p), str(p)]
    return [*cmd, "--chdir", str(root), "--", *argv]


PIDS_CGROUP_V1 = Path("/sys/fs/cgroup/pids")


def _pids_cgroup(limit: int) -> Path | None:
    """A fresh pids cgroup capped at `limit` tasks, where this process may make one (root, cgroup v1's
    pids hierarchy); None elsewhere. RLIMIT_NPROC alone does not stop a fork bomb of a sandbox started by
    root (its user namespace's processes are not counted against it), the cgroup does."""
    if os.geteuid() != 0 or not (PIDS_CGROUP_V1 / "cgroup.procs").is_file():
        return None
    group = PIDS_CGROUP_V1 / f"vibe-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(limit))
    except OSError:
        return None
    return group


def _remove_cgroup(group: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            group.rmdir()
            return
        except OSError:  # tasks still exiting after the namespace's init was killed
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)


def _limits(limits: SandboxLimits, cgroup: Path | None):
    def apply() -> None:
        import resource

        if cgroup is not None:  # joined before bwrap starts, so every process of the sandbox is in it
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

        mem = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb << 20, limits.file_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setsid()  # its own process group, so the timeout kills bwrap and, with it, the namespace

    return apply


# Further environment and read-only paths every child gets while an `extra_access` block is open (the
# LLM judge's bridge, vibe.judge_link): set by the trusted parent, never by client code.
_EXTRA: dict[str, Any] = {"env": {}, "readable": []}


@contextlib.contextmanager
def extra_access(env: dict[str, str], readable: Sequence[Path]) -> Iterator[None]:
    """While inside, every `run_sandboxed` child also gets `env` and may read `readable` (blocks nest)."""
    saved = {"env": dict(_EXTRA["env"]), "readable": list(_EXTRA["readable"])}
    _EXTRA["env"].update(env)
    _EXTRA["readable"].extend(readable)
    try:
        yield
    finally:
        _EXTRA.update(saved)


def run_sandboxed(
    module: str, args: list[str], *, root: Path, name: str, limits: SandboxLimits,
    writable: Sequence[Path] = (), readable: Sequence[Path] = (),
) -> SandboxResult:
    """`python -m module *args --result FILE` in the sandbox of client folder `root`; the child writes its
    JSON answer to FILE (in `root/.vibe/sandbox/<name>/`, the child's scratch folder). `writable` and
    `readable` are further folders or files it may write or read (a run dir, a token, a bridge socket).
    Raises RuntimeError with `sandbox_unavailable()`'s reason when there is no sandbox."""
    why = sandbox_unavailable()
    if why:
        raise RuntimeError(why)
    scratch = root / ".vibe" / SCRATCH / name
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    result_file = scratch / "result.json"
    argv = [sys.executable, "-m", module, *args, "--result", str(result_file)]
    project = str(Path(__file__).resolve().parents[1])
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": "/tmp", "LANG": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join([project, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]),
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "NO_PROXY": "*", "HF_HUB_OFFLINE": "1", **_EXTRA["env"]}
    readable = [*readable, *_EXTRA["readable"]]
    cmd = bwrap_command(argv, root=root, writable=writable, readable=readable, scratch=scratch)
    cgroup = _pids_cgroup(limits.processes)
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", preexec_fn=_limits(limits, cgroup))
        try:
            out, _ = proc.communicate(timeout=limits.timeout_s)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            code = None
    finally:
        if cgroup is not None:
            _remove_cgroup(cgroup)
    result = None
    if result_file.is_file():
        try:
            result = json.loads(result_file.read_text())
        except ValueError:
            result = None
    return SandboxResult(code, result, tail(out or ""))


def limits_note(limits: SandboxLimits) -> str:
    """The limits in words, for messages."""
    return (f"sandbox limits: {limits.timeout_s:g} s wall (check.timeout_s), {limits.memory_mb} MB (check.memory_mb), "
            f"{limits.processes} processes, no network, writes only in the client folder")
