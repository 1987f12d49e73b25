"""Parse the JSONL metrics a job appends to A3R_METRICS_FILE.

Each line is one JSON object with an integer "step" and metric name -> number. Parsing is tolerant
because the job's output is untrusted: an unparsable line, a non-object or a line without a usable step
is counted as corrupt and skipped; non-numeric fields are ignored; NaN/inf values become None (SQLite
cannot store NaN) and set `saw_nan`, which the failure classifier uses. Only complete lines (ending in a
newline) are consumed unless `final`, so a line being written is read on the next pass.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MAX_READ_BYTES", "MetricsChunk", "parse_metric_bytes", "read_metrics"]

MAX_READ_BYTES = 4 << 20  # per pass; a huge backlog is consumed over several passes


@dataclass
class MetricsChunk:
    points: list[tuple[int, str, float | None]] = field(default_factory=list)  # (step, name, value)
    consumed: int = 0  # bytes of input used (complete lines only)
    new_offset: int = 0  # read_metrics: absolute file offset to resume from
    corrupt: int = 0
    saw_nan: bool = False
    last_step: int | None = None


def parse_metric_bytes(data: bytes, *, final: bool = False) -> MetricsChunk:
    out = MetricsChunk()
    end = len(data) if final else data.rfind(b"\n") + 1
    for raw in data[:end].split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            out.corrupt += 1
            continue
        step = obj.get("step") if isinstance(obj, dict) else None
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            out.corrupt += 1
            continue
        for name, value in obj.items():
            if name == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(value):
                out.saw_nan = True
                value = None
            out.points.append((step, str(name), None if value is None else float(value)))
        out.last_step = step if out.last_step is None else max(out.last_step, step)
    out.consumed = end
    return out


def read_metrics(path: str | Path, offset: int, *, final: bool = False) -> MetricsChunk:
    """Parse the file from byte `offset`. A file shorter than `offset` (truncated or replaced by the job)
    is re-read from the start; the store's unique (attempt, step, name) key drops the repeats."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < offset:
                offset = 0
            f.seek(offset)
            data = f.read(MAX_READ_BYTES)
    except FileNotFoundError:
        return MetricsChunk(new_offset=offset)
    chunk = parse_metric_bytes(data, final=final and len(data) < MAX_READ_BYTES)
    chunk.new_offset = offset + chunk.consumed
    return chunk
