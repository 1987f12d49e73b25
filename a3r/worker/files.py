"""Names of the files in an attempt directory, and the atomic JSON writer (stdlib only: the remote
probe imports this on every monitor tick, so it must start fast)."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = [
    "HEARTBEAT_FILE",
    "LOG_FILE",
    "METRICS_FILE",
    "RESULT_FILE",
    "SPEC_FILE",
    "write_bytes_atomic",
    "write_json_atomic",
]

SPEC_FILE = "attempt.json"
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"
HEARTBEAT_FILE = "heartbeat.json"
RESULT_FILE = "result.json"


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write via temp file + rename: a reader sees the old or the new file, never a torn one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json_atomic(path: str | Path, data: dict) -> None:
    """Write JSON atomically (see `write_bytes_atomic`)."""
    write_bytes_atomic(path, json.dumps(data).encode())
