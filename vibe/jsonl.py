"""Read a JSON-lines file (a client's data/*.jsonl), keeping every parsable line and naming the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_jsonl"]


def read_jsonl(path: Path) -> tuple[list[Any], list[str]]:
    """(records, problems): every parsable line, and one message per line that is not JSON."""
    records, problems = [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError as e:
            problems.append(f"{path.name} line {n}: not JSON ({e})")
    return records, problems
