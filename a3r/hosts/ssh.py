"""An ssh host: tmux, the worker and the probe all run on the host; nothing here but the ssh client.

Each operation is one `ssh` invocation (BatchMode, so a missing key fails instead of prompting):
launch ships the run files as a tar stream on stdin and starts the session in the same round trip; a
probe pipes a JSON request into `python -m a3r.worker.probe`. ssh's own failure (exit 255: refused,
timed out, auth) raises `HostUnreachable`; a command failing on the host raises `HostError`.

Workers on ssh hosts write files only (no store access, SQLite must stay on one machine); the monitor
ingests their heartbeats, metrics and results from the probe. a3r must be installed on the host, for the
Python named by the inventory's `python` (default: the same path as on the controller).
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

from a3r.config import HostSpec
from a3r.exceptions import HostError, HostUnreachable
from a3r.hosts.base import AttemptFiles, ProbeReport, ProbeRequest, SessionInfo, worker_command
from a3r.worker.files import SPEC_FILE
from a3r.worker.spec import AttemptSpec

__all__ = ["SshHost"]


class SshHost:
    def __init__(self, spec: HostSpec, *, socket: str, workspace_key: str):
        self.spec = spec
        self.socket = socket
        self.python = spec.python or sys.executable
        self.base = f"{spec.workdir.rstrip('/')}/{workspace_key}"

    @property
    def name(self) -> str:
        return self.spec.name

    def run_dir(self, run_id: int) -> str:
        return f"{self.base}/runs/{run_id}"

    def worker_db_path(self) -> str | None:
        return None

    # -- ssh plumbing -------------------------------------------------------------------------------------
    def ssh_argv(self, remote_cmd: str, *, tty: bool = False) -> list[str]:
        s = self.spec
        argv = [
            "ssh",
            "-p",
            str(s.port),
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={int(max(1, s.connect_timeout_s))}",
        ]
        argv += ["-o", "StrictHostKeyChecking=accept-new", "-o", "LogLevel=ERROR"]
        argv += ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2"]
        if s.known_hosts_file:
            argv += ["-o", f"UserKnownHostsFile={Path(s.known_hosts_file).expanduser()}"]
        if s.identity_file:
            argv += ["-i", str(Path(s.identity_file).expanduser()), "-o", "IdentitiesOnly=yes"]
        argv += ["-t"] if tty else ["-T"]
        # "--" ends ssh's options: the address is a destination even if validation were bypassed.
        return [*argv, "--", s.address, remote_cmd]

    def _run(self, remote_cmd: str, *, stdin: bytes | None = None, timeout: float = 30.0) -> bytes:
        try:
            proc = subprocess.run(
                self.ssh_argv(remote_cmd),
                input=stdin if stdin is not None else b"",
                capture_output=True,
                timeout=self.spec.connect_timeout_s + timeout,
            )
        except subprocess.TimeoutExpired as e:
            raise HostUnreachable(f"{self.name}: ssh timed out after {e.timeout:.0f} s") from None
        err = proc.stderr.decode("utf-8", "replace").strip()
        if proc.returncode == 255:
            raise HostUnreachable(f"{self.name}: {err or 'ssh failed'}")
        if proc.returncode != 0:
            raise HostError(f"{self.name}: remote command failed ({proc.returncode}): {err[-500:]}")
        return proc.stdout

    def _tmux(self, *args: str) -> list[str]:
        return ["tmux", "-L", self.socket, *args]

    # -- operations ---------------------------------------------------------------------------------------
    def launch(self, session: str, spec: AttemptSpec, run_files: dict[str, str]) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            rel_attempt = Path(spec.attempt_dir).relative_to(spec.run_dir)
            for name, text in [*run_files.items(), (str(rel_attempt / SPEC_FILE), spec.to_json())]:
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))
        tmux = self._tmux(
            "start-server",
            ";",
            "set-option",
            "-g",
            "remain-on-exit",
            "on",
            ";",
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "200",
            "-y",
            "50",
            "-c",
            spec.run_dir,
            worker_command(self.python, spec),
        )
        rd = shlex.quote(spec.run_dir)
        self._run(f"mkdir -p {rd} && tar -xf - -C {rd} && {shlex.join(tmux)}", stdin=buf.getvalue())

    def probe(self, requests: list[ProbeRequest]) -> ProbeReport:
        req = {
            "socket": self.socket,
            "attempts": [
                {"id": r.attempt_id, "dir": r.attempt_dir, "metrics_offset": r.metrics_offset}
                for r in requests
            ],
        }
        raw = self._run(f"{shlex.quote(self.python)} -m a3r.worker.probe", stdin=json.dumps(req).encode())
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise HostError(f"{self.name}: probe answered non-JSON: {raw[:200]!r}") from e
        sessions = {
            n: SessionInfo(name=n, dead=v["dead"], status=v["status"], pid=v["pid"])
            for n, v in data["sessions"].items()
        }
        files = {int(k): AttemptFiles.from_json(v) for k, v in data["attempts"].items()}
        return ProbeReport(sessions=sessions, files=files)

    def kill(self, session: str, pgid: int | None = None, pid: int | None = None) -> None:
        parts = [f"kill -KILL -- -{int(pgid)} 2>/dev/null"] if pgid else []
        parts += [f"kill -KILL {int(pid)} 2>/dev/null"] if pid else []
        parts += [shlex.join(self._tmux("kill-session", "-t", session)) + " 2>/dev/null", "true"]
        self._run("; ".join(parts))

    def read_log(self, attempt_dir: str, lines: int) -> str:
        path = shlex.quote(f"{attempt_dir}/log.txt")
        return self._run(f"tail -n {int(lines)} {path} 2>/dev/null || true").decode("utf-8", "replace")

    def attach_argv(self, session: str) -> list[str]:
        return self.ssh_argv(shlex.join(self._tmux("attach-session", "-t", session)), tty=True)

    def shutdown(self) -> None:
        """Kill this campaign's tmux server on the host and remove the socket file tmux leaves behind."""
        sock = f'"${{TMUX_TMPDIR:-/tmp}}/tmux-$(id -u)/"{shlex.quote(self.socket)}'
        try:
            self._run(shlex.join(self._tmux("kill-server")) + f" 2>/dev/null; rm -f {sock}; true")
        except HostError:
            pass
