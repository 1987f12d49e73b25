"""One look at a host: its tmux sessions and the files of the attempts running there.

The monitor calls `probe()` in-process for the local host and runs `python -m a3r.worker.probe` over ssh
for remote hosts (request JSON on stdin, report JSON on stdout), so one ssh round trip per host per tick
brings back everything: which panes are alive or dead, each attempt's heartbeat and result files, and
the metric lines appended since the last look (parsed on the host, so only points travel).

Session listing uses the tmux CLI; a missing server means "no sessions", not an error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from a3r.worker.files import HEARTBEAT_FILE, METRICS_FILE, RESULT_FILE
from a3r.worker.metrics import read_metrics

__all__ = ["list_sessions", "probe", "read_attempt_files"]

_FMT = "#{session_name}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_pid}"


def list_sessions(socket: str) -> dict[str, dict]:
    """session name -> {"dead": bool, "status": int | None, "pid": int | None} on a tmux socket."""
    proc = subprocess.run(
        ["tmux", "-L", socket, "list-panes", "-a", "-F", _FMT], capture_output=True, text=True, timeout=30
    )
    if proc.returncode != 0:
        err = proc.stderr.lower()
        if any(
            m in err
            for m in (
                "no server running",
                "error connecting",
                "no such file",
                "no current target",
                "server exited",
            )
        ):
            return {}
        raise RuntimeError(f"tmux list-panes failed: {proc.stderr.strip()}")
    out: dict[str, dict] = {}
    for line in proc.stdout.splitlines():
        name, dead, status, pid = (line.split("\t") + ["", "", "", ""])[:4]
        out[name] = {
            "dead": dead == "1",
            "status": int(status) if status.lstrip("-").isdigit() else None,
            "pid": int(pid) if pid.isdigit() else None,
        }
    return out


def _read_json(path: Path) -> dict | None:
    """A JSON object from `path`, or None if missing or unreadable (a job may have clobbered it)."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def read_attempt_files(attempt_dir: str, metrics_offset: int | None) -> dict:
    """Heartbeat, result and (if `metrics_offset` is not None) new metric points of one attempt."""
    d = Path(attempt_dir)
    out: dict = {"heartbeat": _read_json(d / HEARTBEAT_FILE), "result": _read_json(d / RESULT_FILE)}
    if metrics_offset is not None:
        # final when the worker is done: a last line without newline still counts
        final = out["result"] is not None
        chunk = read_metrics(d / METRICS_FILE, metrics_offset, final=final)
        out["metrics"] = {
            "points": chunk.points,
            "new_offset": chunk.new_offset,
            "corrupt": chunk.corrupt,
            "saw_nan": chunk.saw_nan,
        }
    return out


def probe(socket: str, attempts: list[dict]) -> dict:
    """`attempts`: [{"id", "dir", "metrics_offset" (int or None)}] -> {"sessions", "attempts": {id: files}}."""
    return {
        "sessions": list_sessions(socket),
        "attempts": {str(a["id"]): read_attempt_files(a["dir"], a.get("metrics_offset")) for a in attempts},
    }


def main() -> None:
    req = json.load(sys.stdin)
    json.dump(probe(req["socket"], req["attempts"]), sys.stdout)


if __name__ == "__main__":
    main()
