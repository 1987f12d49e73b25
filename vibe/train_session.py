"""`vibe train DIR`, `vibe status DIR`, `vibe attach DIR`: training a checked client in tmux.

The run lives in DIR/.vibe/train/. One tmux session per client on vibe's own socket (`tmux -L vibe`),
with windows: `client` runs vibe.training_loop (which owns the swarm server subprocesses), `server` follows the
server's log and, for a client with `second_server_roles` (adversarial training), `server-2` the second's. A finished run's session stays open for viewing until the next `vibe train`. Dead panes stay visible (the A3R tmux config: remain-on-exit). tmux is the
container and the viewer; the truth is in the run's files (rewards.jsonl, status.json).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import libtmux
from libtmux.exc import LibTmuxException

from a3r.hosts.local import TMUX_CONF
from vibe.check import check, load_report, source_hash
from vibe.config import VibeJob
from vibe.exceptions import CheckFailed, VibeError
from vibe.flags import Stage
from vibe.layout import CONFIG_FILE, ClientDir
from vibe.progress import read_rewards, read_status

__all__ = ["SOCKET", "attach", "launch", "run_dir", "session_name", "status"]

SOCKET = "vibe"  # tests and parallel users pick another with $VIBE_TMUX_SOCKET


def socket_name() -> str:
    return os.environ.get("VIBE_TMUX_SOCKET") or SOCKET


def run_dir(cd: ClientDir) -> Path:
    return cd.state_dir / "train"


def session_name(cd: ClientDir) -> str:
    """`vibe-<job name>-<hash of the folder>`: readable, and unique per folder."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", VibeJob.load(cd.path(CONFIG_FILE)).name)[:30]
    return f"vibe-{name}-{hashlib.sha256(str(cd.root).encode()).hexdigest()[:6]}"


def _server() -> libtmux.Server:
    if shutil.which("tmux") is None:
        raise VibeError("tmux is not installed; install it (apt-get install tmux) to use vibe train")
    conf = Path.home() / ".cache" / "vibe" / "tmux.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    if not conf.exists() or conf.read_text() != TMUX_CONF:
        conf.write_text(TMUX_CONF)
    return libtmux.Server(socket_name=socket_name(), config_file=str(conf))


def _alive(server: libtmux.Server, name: str) -> bool:
    try:
        return server.has_session(name)
    except LibTmuxException:
        return False


def gate(cd: ClientDir, recheck: bool, echo: Callable[[str], None]) -> None:
    """Raise CheckFailed unless a passing, complete check (dry run and training step included) describes
    the folder as it is now, sources and data alike; runs that check when the last one does not."""
    report = load_report(cd)
    if recheck or report is None or report.source_hash != source_hash(cd):
        echo("checking the client first (vibe check)")
        report = check(cd.root)
    elif Stage.TRAIN_STEP not in report.stages_run and report.passed:
        echo("the last check skipped the dry run (--no-dry-run); running the whole check first")
        report = check(cd.root)
    if not report.passed:
        raise CheckFailed(f"vibe check does not pass, so training would be wasted:\n{report.render()}\n"
                          f"fix the errors, then run `vibe train {cd.root}` again")


def launch(
    path: str | Path,
    *,
    steps: int,
    recheck: bool = False,
    warm_start: int = 0,
    echo: Callable[[str], None] = print,
) -> str:
    """Gate on the check, then start the run's tmux session; returns the session name. `warm_start` > 0
    runs that many supervised steps on the gold answers first (`vibe.training_loop`)."""
    if steps < 1:
        raise VibeError("--steps must be at least 1")
    if warm_start < 0:
        raise VibeError("--warm-start must be 0 (none) or a number of supervised steps")
    cd = ClientDir.open(path)
    gate(cd, recheck, echo)
    name = session_name(cd)
    server = _server()
    rdir = run_dir(cd)
    if _alive(server, name):
        st = read_status(rdir)
        if st is None or st["state"] in ("running", "warm-start"):
            raise VibeError(f"{name} is already training; follow it with `vibe status {path}` or `vibe attach {path}`")
        server.kill_session(name)  # a finished run's session, kept open for viewing; this folder's own
    rdir.mkdir(parents=True, exist_ok=True)
    py = shlex.quote(sys.executable)
    client_cmd = (f"{py} -m vibe.training_loop {shlex.quote(str(cd.root))} --run-dir {shlex.quote(str(rdir))} "
                  f"--steps {int(steps)} --warm-start {int(warm_start)} 2>&1 | tee -a {shlex.quote(str(rdir / 'client.log'))}; exit ${{PIPESTATUS[0]}}")
    env = {k: os.environ[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS", "PATH") if k in os.environ}
    try:
        session = server.new_session(session_name=name, attach=False, start_directory=str(cd.root),
                                     window_name="client", window_command=f"bash -c {shlex.quote(client_cmd)}",
                                     environment=env, x=200, y=50)
        logs = ["server"] + (["server-2"] if VibeJob.load(cd.path(CONFIG_FILE)).second_server_roles else [])
        for log in logs:  # as the reference workflow: server, second server, client
            (rdir / f"{log}.log").touch()
            session.new_window(window_name=log, attach=False, start_directory=str(rdir),
                               window_shell=f"tail -n +1 -F {shlex.quote(str(rdir / f'{log}.log'))}", environment=env)
    except LibTmuxException as e:
        if _alive(server, name):
            server.kill_session(name)
        raise VibeError(f"cannot start tmux session {name}: {e}") from e
    echo(f"training {steps} step(s) in tmux session {name}: `vibe status {path}` for rewards, "
         f"`vibe attach {path}` to watch (detach with Ctrl-b d)")
    return name


def status(path: str | Path) -> str:
    """The run's state, reward per step, and flags, as text."""
    cd = ClientDir.open(path)
    rdir = run_dir(cd)
    st = read_status(rdir)
    if st is None:
        return f"{path}: not training (start with `vibe train {path}`)"
    name = session_name(cd)
    alive = _alive(_server(), name) if shutil.which("tmux") else False
    state = st["state"]
    if state in ("running", "warm-start") and not alive:
        state = "dead (the session ended without finishing; see .vibe/train/client.log)"
    lines = [f"{name}: {state}, step {st.get('step')}/{st['steps']}" + (f", error: {st['error']}" if st.get("error") else "")]
    lines += [f"  FLAG {f['code']} (step {f['step']}): {f['message']}" for f in st.get("flags", [])]
    lines.append("  step  reward_mean  reward_std  flat_groups")
    for r in read_rewards(rdir):
        lines.append(f"  {r['step']:>4}  {r['reward_mean']:>11.3f}  {r['reward_std']:>10.3f}  {r['flat_groups']}/{r['groups']}")
    return "\n".join(lines)


def attach(path: str | Path) -> int:
    """Attach this terminal to the run's session (replaces the process); a clear message if there is none."""
    cd = ClientDir.open(path)
    name = session_name(cd)
    if not _alive(_server(), name):
        raise VibeError(f"no live session {name}; `vibe status {path}` shows how the last run ended")
    if not sys.stdout.isatty():
        raise VibeError(f"not a terminal: run `tmux -L {socket_name()} attach -t {name}` from one")
    os.execvp("tmux", ["tmux", "-L", socket_name(), "attach", "-t", name])
    return 0  # not reached
