"""A real OpenSSH server on 127.0.0.1 for the ssh-host tests, with keys generated into a temp dir.

If `sshd` is missing and we are root with apt-get, it is installed (`apt-get install -y
openssh-server`); otherwise the tests that need it are skipped with that command in the reason.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

INSTALL = "apt-get install -y openssh-server"


def find_sshd() -> str | None:
    for cand in (shutil.which("sshd"), "/usr/sbin/sshd"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def ensure_sshd() -> str | None:
    """Path of sshd, installing it when possible; None if it cannot be had."""
    found = find_sshd()
    if found or os.geteuid() != 0 or not shutil.which("apt-get") or os.environ.get("A3R_TEST_NO_APT"):
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "install", "-y", "-q", "openssh-server"],
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "openssh-server"],
    ):
        if subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode == 0 and find_sshd():
            break
    return find_sshd()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SshServer:
    """sshd -D on a high loopback port; `stop()`/`start()` make the host unreachable and back."""

    def __init__(self, sshd: str, root: Path):
        self.sshd, self.root = sshd, root
        self.port = _free_port()
        self.user = getpass.getuser()
        self.key = root / "user_key"
        self.known_hosts = root / "known_hosts"
        for name in ("host_key", "user_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True
            )
        (root / "authorized_keys").write_text((root / "user_key.pub").read_text())
        self.config = root / "sshd_config"
        self.config.write_text(
            f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {root}/host_key
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PrintMotd no
"""
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege-separation dir sshd requires
        self.proc = subprocess.Popen(
            [self.sshd, "-D", "-e", "-f", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "sshd.log", "ab"),
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()[-800:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def stop(self) -> None:
        """Stop listening (the host becomes unreachable). Sessions it started, like tmux, live on."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None

    def host_spec(self, name: str, workdir: Path, **kw):
        from a3r.config import HostSpec

        return HostSpec(
            name=name,
            kind="ssh",
            address=f"{self.user}@127.0.0.1",
            port=self.port,
            identity_file=str(self.key),
            known_hosts_file=str(self.known_hosts),
            workdir=str(workdir),
            connect_timeout_s=3,
            **kw,
        )
