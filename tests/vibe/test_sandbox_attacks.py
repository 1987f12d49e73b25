"""Client code that attacks its host, run by `vibe check`, `vibe data` and the dry run: each attack is
stopped by the bubblewrap sandbox (vibe.sandbox) and shows up in the report. Run as a plain subprocess of
root (the sandbox before this one) every attack here succeeded, so each test fails without it."""

from __future__ import annotations

import json
import socket
import textwrap

import pytest

from vibe.check import check
from vibe.data_writer import write_data
from vibe.exceptions import LayoutError
from vibe.flags import Severity
from vibe.layout import ClientDir
from vibe.sandbox import sandbox_unavailable

pytestmark = pytest.mark.skipif(sandbox_unavailable() is not None, reason=f"no sandbox: {sandbox_unavailable()}")


def attack(client, code: str) -> None:
    """client.py runs `code` at import, then raises with what it found (so the report carries it)."""
    (client / "client.py").write_text(textwrap.dedent(code) + "\nraise RuntimeError('ATTACK ' + repr(found))\n"
                                      "def run(llm, model, task, sampling):\n    return {}\n")


def import_error(client) -> str:
    r = check(client, dry_run=False)
    assert r.codes(Severity.ERROR) == {"import_failed"}, r.render()
    return r.errors[0].message


@pytest.fixture
def listener():
    """A loopback listener on the host: the client must not reach it."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.5)
    yield srv
    srv.close()


def test_no_network_a_loopback_listener_on_the_host_is_unreachable(qa_client, listener):
    port = listener.getsockname()[1]
    attack(qa_client, f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=5)
            found = "connected"
        except OSError as e:
            found = type(e).__name__
        """)
    assert "ATTACK 'ConnectionRefusedError'" in import_error(qa_client)
    with pytest.raises(TimeoutError):
        listener.accept()  # nothing came through


def test_host_files_outside_the_folder_cannot_be_read(qa_client, tmp_path):
    secret = tmp_path / "secret.txt"  # beside the client folder, readable by its user
    secret.write_text("hunter2")
    attack(qa_client, f"""
        found = []
        for path in ("/etc/passwd", {str(secret)!r}, "/root/.bashrc"):
            try:
                found.append(open(path).read()[:20])
            except OSError as e:
                found.append(type(e).__name__)
        """)
    msg = import_error(qa_client)
    assert "ATTACK ['FileNotFoundError', 'FileNotFoundError', 'FileNotFoundError']" in msg
    assert "hunter2" not in msg


def test_writes_outside_the_folder_never_reach_the_host_nor_its_reports(qa_client, tmp_path):
    outside = tmp_path / "escaped.txt"
    check(qa_client, dry_run=False)  # a first report exists, which the client then tries to forge
    report = (qa_client / ".vibe" / "check.json").read_text()
    attack(qa_client, f"""
        found = []
        for path in ({str(outside)!r}, "/usr/escaped.txt", {str(qa_client / ".vibe" / "check.json")!r}, "inside.txt"):
            try:
                open(path, "w").write("x")
                found.append("wrote")
            except OSError as e:
                found.append(type(e).__name__)
        """)
    msg = import_error(qa_client)
    # the first write lands in the sandbox's own /tmp (an empty tmpfs, gone at exit); OSError: read-only
    assert "ATTACK ['wrote', 'OSError', 'OSError', 'wrote']" in msg
    assert not outside.exists() and (qa_client / "inside.txt").read_text() == "x"
    assert json.loads(report)["flags"] != json.loads((qa_client / ".vibe" / "check.json").read_text())["flags"]


def test_os_system_runs_as_nobody_inside_the_sandbox(qa_client, tmp_path):
    outside = tmp_path / "shell-was-here"
    attack(qa_client, f"""
        import os, subprocess
        os.system("touch {outside}")  # lands in the sandbox's own /tmp, gone at exit
        found = subprocess.run("id -u; cat /etc/shadow 2>&1 | cut -c1-4", shell=True, capture_output=True, text=True).stdout.split()
        """)
    msg = import_error(qa_client)
    assert "ATTACK ['65534', 'cat:']" in msg  # not root; no /etc/shadow in the sandbox
    assert not outside.exists()


def test_a_fork_bomb_is_stopped_and_reported(qa_client):
    attack(qa_client, """
        import os, time
        found = 0
        while True:
            try:
                if os.fork() == 0:
                    time.sleep(600)
                    os._exit(0)
                found += 1
            except OSError as e:
                found = f"{found} forks, then {type(e).__name__}"
                break
        """)
    msg = import_error(qa_client)
    assert "forks, then BlockingIOError" in msg
    assert int(msg.split("ATTACK '")[1].split()[0]) < 256  # SandboxLimits.processes


def test_a_memory_bomb_is_stopped_and_reported(qa_client):
    attack(qa_client, """
        try:
            blob = bytearray(64 * 1024 ** 3)
            found = "allocated"
        except MemoryError:
            found = "MemoryError"
        """)
    assert "ATTACK 'MemoryError'" in import_error(qa_client)


def test_vibe_data_runs_make_data_in_the_sandbox(qa_client, tmp_path):
    outside = tmp_path / "from-make-data"
    text = (qa_client / "make_data.py").read_text()
    (qa_client / "make_data.py").write_text(text + f"\nopen({str(outside)!r}, 'w').write('x')\nopen('/etc/passwd')\n")
    with pytest.raises(LayoutError, match="FileNotFoundError: .*'/etc/passwd'"):
        write_data(ClientDir.open(qa_client))
    assert not outside.exists()  # written to the sandbox's own /tmp, never the host's


@pytest.mark.slow
def test_in_the_dry_run_the_server_is_reachable_and_nothing_else(qa_client, listener):
    """The episode reaches the model through the bridge (the model call works), then fails on the host's
    other loopback port; the report names the error and keeps the client's traceback. The whole-loop
    probes (the scripted model, over their own bridge) come first and are blocked the same way; with the
    attack made to skip them, the dry run's episodes (the swarm server) meet it."""
    port = listener.getsockname()[1]
    text = (qa_client / "client.py").read_text()
    attack = textwrap.dedent(f"""
        _run = run
        def run(llm, model, task, sampling):
            out = _run(llm, model, task, sampling)  # the model call, through the bridge
            import socket
            if model != SKIP:
                try:
                    socket.create_connection(("127.0.0.1", {port}), timeout=5)
                except OSError as e:
                    raise RuntimeError(f"network blocked after a model reply: {{type(e).__name__}}") from None
            return out
        """)
    (qa_client / "client.py").write_text(text + "SKIP = None\n" + attack)
    r = check(qa_client)
    assert r.codes(Severity.ERROR) == {"run_raises_on_reply"}, r.render()
    assert "network blocked after a model reply: ConnectionRefusedError" in r.errors[0].message
    (qa_client / "client.py").write_text(text + "SKIP = 'scripted'\n" + attack)  # the scripted model's name
    r = check(qa_client)
    assert r.codes(Severity.ERROR) == {"episode_failed"}, r.render()
    assert "network blocked after a model reply: ConnectionRefusedError" in r.errors[0].message
    assert "client.py" in r.errors[0].detail["traceback"]
    with pytest.raises(TimeoutError):
        listener.accept()
