"""Dataset checks (pure): schema, non-empty unique task ids, enough tasks for batch x group, overlap.

The reference system's spy example generated tasks with empty ids, so all 140 episodes formed one group
and no training step ever fired; these checks exist so that is caught before a run, not after.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vibe.answer_match import normal_text
from vibe.flags import Report, Severity, Stage
from vibe.layout import TASK_FIELDS

__all__ = ["check_tasks", "normal_text"]


def _schema(name: str, tasks: list[Any], report: Report) -> None:
    for i, t in enumerate(tasks):
        if not isinstance(t, dict):
            report.add(Stage.DATASET, "task_not_object", Severity.ERROR, f"{name} task {i} is not a JSON object")
            return
        missing = [f for f in TASK_FIELDS if f not in t]
        if missing:
            report.add(
                Stage.DATASET, "task_missing_fields", Severity.ERROR,
                f"{name} task {i} lacks {', '.join(missing)}; every task needs {', '.join(TASK_FIELDS)} (see vibe.layout)",
            )
            return
        for f in ("prompt", "gold"):
            if not isinstance(t[f], str):
                report.add(Stage.DATASET, "task_field_type", Severity.ERROR, f"{name} task {i}: {f} must be a string")
                return
        if "decoys" in t and not (isinstance(t["decoys"], list) and all(isinstance(d, str) for d in t["decoys"])):
            report.add(Stage.DATASET, "task_field_type", Severity.ERROR, f"{name} task {i}: decoys must be a list of strings")
            return


def check_tasks(train: list[Any], test: list[Any], batch_size: int, group_size: int, report: Report) -> None:
    """Add dataset flags to `report`. `batch_size` tasks are needed per training step (x `group_size` episodes)."""
    for name, tasks in (("train", train), ("test", test)):
        if not tasks:
            report.add(Stage.DATASET, f"{name}_empty", Severity.ERROR, f"data/{name}.jsonl has no tasks; run `vibe data DIR` to write it from make_data.py")
        _schema(name, tasks, report)
    if report.errors:
        return
    ids = [t["id"] for t in train + test]
    empty = sum(1 for i in ids if not isinstance(i, str) or not i.strip())
    if empty:
        report.add(
            Stage.DATASET, "empty_task_id", Severity.ERROR,
            f"{empty} task(s) have an empty or non-string id; the server groups episodes by task id, so they would "
            "all fall into one group and the pool would never see complete groups",
        )
    dup = sorted(i for i, c in Counter(ids).items() if c > 1 and isinstance(i, str))
    if dup:
        report.add(
            Stage.DATASET, "duplicate_task_id", Severity.ERROR,
            f"{len(dup)} task id(s) occur more than once across train and test (e.g. {dup[:3]}); make ids unique",
        )
    if len(train) < batch_size:
        report.add(
            Stage.DATASET, "too_few_tasks", Severity.ERROR,
            f"{len(train)} training tasks cannot fill one step of batch_size={batch_size} tasks x group_size="
            f"{group_size} episodes; generate more tasks or lower swarm.pool.batch_size",
        )
    prompts = {normal_text(t["prompt"]) for t in train}
    overlap = [t["id"] for t in test if normal_text(t["prompt"]) in prompts]
    if overlap:
        report.add(
            Stage.DATASET, "train_test_overlap", Severity.ERROR,
            f"{len(overlap)} test task(s) (e.g. {overlap[:3]}) have the same prompt as a training task, up to case, "
            "spacing and punctuation; held-out scores would be inflated",
        )
    report.stats["dataset"] = {"train": len(train), "test": len(test)}
