"""Written `a3r bench` reports the benchmark page shows beside (or instead of) the stores' raw results:
`report.json` under each workspace's `bench/reports/<suite>/` (where `a3r bench report` writes) and under
`<reports>/bench-*/` and `<reports>/examples/bench-*/` (reports committed to the repository).

Only the fields the page shows are passed on; an unreadable file is listed with its error, not skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["HOW_TO_PRODUCE", "bench_reports", "search_patterns"]

HOW_TO_PRODUCE = [
    "a3r bench run --commits BASE..HEAD",
    "a3r bench report",
]

_ROW_KEYS = (
    "benchmark",
    "metric",
    "unit",
    "direction",
    "baseline",
    "candidate",
    "delta",
    "rel",
    "p",
    "verdict",
)


def search_patterns(reports_dir: Path) -> list[str]:
    """Where `bench_reports` looks, for a page that found nothing to say so."""
    return [
        f"{reports_dir}/bench-*/",
        f"{reports_dir}/examples/bench-*/",
        "<each workspace>/bench/reports/*/",
    ]


def _candidates(reports_dir: Path, workspaces: Iterable[Path]) -> list[Path]:
    found = [
        *sorted(reports_dir.glob("bench-*/report.json")),
        *sorted(reports_dir.glob("examples/bench-*/report.json")),
    ]
    for ws in workspaces:
        found += sorted(ws.glob("bench/reports/*/report.json"))
    return list(dict.fromkeys(p.resolve() for p in found))


def _read(path: Path, root: Path) -> dict[str, Any]:
    try:
        where = path.parent.relative_to(root).as_posix()
    except ValueError:
        where = path.parent.as_posix()
    try:
        d = json.loads(path.read_text())
        return {
            "where": where,
            "suite": str(d.get("suite", "")),
            "headline": str(d.get("headline", "")),
            "regressed": bool(d.get("regressed")),
            "baseline": str(d.get("baseline") or ""),
            "candidate": str(d.get("candidate") or ""),
            "commits": [
                {"sha": str(c.get("sha", "")), "subject": str(c.get("subject", "")), "time": c.get("time")}
                for c in d.get("commits", [])
            ],
            "table": [{k: row.get(k) for k in _ROW_KEYS} for row in d.get("table", [])],
            "error": "",
        }
    except (OSError, ValueError, AttributeError, TypeError) as e:
        return {"where": where, "error": f"cannot read {path.name}: {e}"}


def bench_reports(reports_dir: Path, workspaces: Iterable[Path], root: Path) -> list[dict[str, Any]]:
    """Every bench report found (see the module docstring), newest candidate last; `where` is its folder
    relative to `root` (the dashboard's workspace) when it lies under it."""
    return [_read(p, root.resolve()) for p in _candidates(reports_dir.resolve(), workspaces)]
