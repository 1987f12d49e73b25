"""Per-step training metrics as JSONL: in the run dir, and in A3R's metrics file when a worker runs us.

A server that resumes from a checkpoint at step k retrains every step after k, so `supersede_after(k)`
drops the run dir's records of those steps first: each step appears once, with the values of the run
that is kept. A3R's file is append-only (its reader tails it by byte offset) and is left alone; A3R
keeps one point per (attempt, step, metric).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.fsutil import atomic_write_text

METRICS_FILE = "metrics.jsonl"
EVAL_SCORES_FILE = "eval_scores.jsonl"


def read_eval_scores(run_dir: str | Path) -> dict[tuple[int, str], tuple[list[str], list[float]]]:
    """(step, accuracy key) -> (held-out item ids in held-out order, each item's score) of a run dir's
    complete evaluations; a step evaluated again after a resume keeps its last record."""
    path = Path(run_dir) / EVAL_SCORES_FILE
    if not path.is_file():
        return {}
    out: dict[tuple[int, str], tuple[list[str], list[float]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out[(int(rec["step"]), rec["key"])] = (rec["items"], rec["scores"])
    return out


def read_run_metrics(run_dir: str | Path) -> list[dict]:
    """The per-step records of a run dir's metrics file (empty when there is none yet)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class MetricsLog:
    def __init__(self, run_dir: str | Path | None) -> None:
        self.paths: list[Path] = []
        # The run dir's own file: the only one `supersede_after` rewrites.
        self.run_path = Path(run_dir) / METRICS_FILE if run_dir is not None else None
        if self.run_path is not None:
            self.paths.append(self.run_path)
        extra = os.environ.get("A3R_METRICS_FILE")
        if extra:
            self.paths.append(Path(extra))

    def write(self, record: dict) -> None:
        line = json.dumps(record) + "\n"
        for p in self.paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "a", encoding="utf-8") as f:
                f.write(line)

    def write_eval_scores(self, step: int, key: str, item_ids: list[str], scores: list[float]) -> None:
        """Each held-out item's score in one complete evaluation, beside the run dir's metrics: which
        problems a run solves, and what any prefix of the held-out set (a smaller one: the set is a prefix
        of its seed's stream) would have scored. Not sent to A3R's file, whose reader takes numbers."""
        if self.run_path is None:
            return
        rec = {"step": step, "key": key, "items": item_ids, "scores": scores}
        self.run_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.run_path.with_name(EVAL_SCORES_FILE), "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    def supersede_after(self, step: int) -> int:
        """Drop the run dir's records of steps after `step` (they will be retrained); returns how many."""
        path = self.run_path
        if path is None or not path.exists():
            return 0
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if not _after(line, step)]
        if len(kept) < len(lines):
            atomic_write_text(path, "".join(kept))
        return len(lines) - len(kept)


def _after(line: str, step: int) -> bool:
    try:
        rec = json.loads(line)
    except ValueError:
        return False  # not ours to judge: kept as it is
    # The trainer logs its step as a float (every metric value is one); bools are not steps.
    k = rec.get("step") if isinstance(rec, dict) else None
    return isinstance(k, (int, float)) and not isinstance(k, bool) and k > step


def reward_by_client(batch) -> dict[str, float]:
    """`reward/<client_id>`: mean reward of each client's episodes in a batch. In a cocktail (task mix)
    each task runs as its own client, so these are the per-task reward curves."""
    by: dict[str, list[float]] = {}
    for e in batch:
        by.setdefault(e.client_id, []).append(e.reward)
    return {f"reward/{c}": sum(r) / len(r) for c, r in sorted(by.items())}
