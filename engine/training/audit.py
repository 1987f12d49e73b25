"""Audit a run's training history from its run dir: the pool journal and the metrics it logged.

`audit_history` is a pure function over the journal's records and the metric rows; `audit_run_dir` reads
them (and the group size from `swarm_config.yaml`). It checks:

- every pooled episode trained in at most one step (the journal's `stepped` records, one per training
  step whether or not a checkpoint holds it yet, less those a restart rolled back) and is marked durably
  trained at most once, and no task (a `s<step>:<position>:<item>` id of
  `swarm train`) trained two groups' worth of episodes: a step's prompts trained twice shows here;
- the steps whose prompts were trained are contiguous (a step's prompts never trained shows as a gap);
- the per-step training metrics name each step once, contiguously from 1;
- every held-out evaluation row counts its items (`eval_items`), all as many as expected, one row per
  step and metric: an evaluation a crash cut short shows as a missing or short count or a second row.

What it cannot see: a compacted journal keeps only live episodes (older history is gone; it says so in
`notes`), and a call whose client disconnected is never recorded by the server (engine.server.core), so
no undelivered token reaches the journal to be found here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TASK_STEP = re.compile(r"(?:^|:)s(\d+):(\d+):")  # swarm train's task ids: [<task>:]s<step>:<position>:<item>
EVAL_PREFIX = "eval_accuracy"


@dataclass
class AuditReport:
    """Violations (empty: the history holds), what was checked, and what could not be."""

    violations: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "violations": self.violations, "checked": self.checked, "notes": self.notes}


def effective_steps(journal: list[dict]) -> dict[int, list[int]]:
    """Step -> the seqs that trained it, from the `stepped` records, as the run's weights hold them now.

    A server restarted from the checkpoint of step k trains step k+1 (and on) again and records it
    again: a `stepped` record of step n drops every earlier record of step n or later (their training
    was rolled back), so what remains is the history the final weights went through."""
    steps: dict[int, list[int]] = {}
    for rec in journal:
        if rec.get("op") == "stepped" and isinstance(rec.get("step"), int):
            n = rec["step"]
            for later in [s for s in steps if s >= n]:
                del steps[later]
            steps[n] = list(rec.get("seqs") or [])
    return steps


def _trained_episodes(journal: list[dict], report: AuditReport) -> list[dict]:
    episodes: dict[int, dict] = {}
    marks: Counter[int] = Counter()
    for rec in journal:
        op = rec.get("op")
        if op in ("add", "prepare"):
            ep = rec.get("episode") or {}
            if isinstance(ep.get("seq"), int):
                episodes[ep["seq"]] = ep
        elif op == "trained":
            marks.update(rec.get("seqs") or [])
        elif op == "seq":
            report.notes.append("the journal was compacted: episodes trained before that are not in it")
    for seq, n in sorted(marks.items()):
        if n > 1:
            report.violations.append(f"episode seq {seq} was marked trained {n} times")
    steps = effective_steps(journal)
    if steps:
        # Every trained step, durable or not: a journal of this version records each one.
        trained: Counter[int] = Counter(s for seqs in steps.values() for s in seqs)
        for seq, n in sorted(trained.items()):
            if n > 1:
                report.violations.append(f"episode seq {seq} trained in {n} steps")
        gaps = sorted(set(range(min(steps), max(steps) + 1)) - set(steps))
        if gaps:
            report.violations.append(f"server steps {gaps} have no trained batch")
        report.checked["trained_steps_journaled"] = len(steps)
    else:
        trained = marks
        if marks:
            report.notes.append("no per-step records (a journal from before them): only checkpointed steps are seen")
    unknown = [s for s in trained if s not in episodes]
    if unknown:
        report.notes.append(f"{len(unknown)} trained seq(s) have no episode record (compacted)")
    return [episodes[s] for s in sorted(trained) if s in episodes]


def _check_tasks(trained: list[dict], group_size: int, report: AuditReport) -> None:
    per_task = Counter(e.get("task_id", "") for e in trained)
    steps: set[int] = set()
    for task, n in sorted(per_task.items()):
        m = TASK_STEP.search(task)
        if m is None:
            continue  # not a swarm train task id (an imported peer sample, a user's own client)
        steps.add(int(m.group(1)))
        # Two groups' worth, not one extra: a retried episode whose first end was accepted can add one
        # more to a group, but only running a step's prompts again gives a task a second whole group.
        if n >= 2 * group_size:
            report.violations.append(
                f"task {task!r} trained {n} episodes, two groups of {group_size} or more: step {m.group(1)}'s prompts trained twice"
            )
    if steps:
        missing = sorted(set(range(min(steps), max(steps) + 1)) - steps)
        for s in missing:
            report.violations.append(f"step {s}'s prompts were never trained (steps {min(steps)}..{max(steps)} trained around it)")
    report.checked["trained_episodes"] = len(trained)
    report.checked["trained_prompt_steps"] = len(steps)


def _check_metrics(metrics: list[dict], eval_items: int | None, report: AuditReport) -> None:
    train_steps: list[int] = []
    evals: Counter[tuple[int, str]] = Counter()
    for row in metrics:
        step = row.get("step")
        if not isinstance(step, (int, float)) or isinstance(step, bool):
            continue
        accuracy_keys = [k for k in row if k.startswith(EVAL_PREFIX)]
        if not accuracy_keys and not any(k.startswith("eval_") for k in row):
            train_steps.append(int(step))
            continue
        for key in accuracy_keys:
            evals[(int(step), key)] += 1
            items = row.get(key.replace(EVAL_PREFIX, "eval_items", 1))
            if items is None:
                report.violations.append(f"the {key} row of step {int(step)} does not count its items")
            elif eval_items is not None and items != eval_items:
                report.violations.append(f"the {key} row of step {int(step)} scored {items} of {eval_items} items")
    for (step, key), n in sorted(evals.items()):
        if n > 1:
            report.violations.append(f"{n} {key} rows for step {step}: an evaluation recorded more than once")
    for step, n in sorted(Counter(train_steps).items()):
        if n > 1:
            report.violations.append(f"training step {step} has {n} metric rows")
    if train_steps:
        missing = sorted(set(range(1, max(train_steps) + 1)) - set(train_steps))
        if missing:
            report.violations.append(f"training steps {missing} have no metric row (steps are not contiguous)")
    report.checked["training_steps"] = len(set(train_steps))
    report.checked["evaluations"] = len(evals)


def audit_history(
    journal: list[dict], metrics: list[dict], *, group_size: int, eval_items: int | None = None
) -> AuditReport:
    """Check a run's training history (see the module docstring); `eval_items` is the expected held-out
    set size, when known (otherwise every evaluation row must count its items)."""
    report = AuditReport()
    _check_tasks(_trained_episodes(journal, report), group_size, report)
    _check_metrics(metrics, eval_items, report)
    return report


def read_json_lines(path: Path) -> list[dict]:
    """The JSON object lines of a journal or metrics file; a torn or non-object line is skipped, as the pool does."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed writer: the pool drops it too
        if isinstance(rec, dict):
            out.append(rec)
    return out


def audit_run_dir(run_dir: str | Path, eval_items: int | None = None) -> AuditReport:
    """`audit_history` over a run dir's `pool.journal.jsonl`, `metrics.jsonl` and `swarm_config.yaml`."""
    run_dir = Path(run_dir)
    config_path = run_dir / "swarm_config.yaml"
    if not config_path.exists():
        raise FileNotFoundError(2, "not a swarm run dir (no swarm_config.yaml)", str(config_path))
    config = yaml.safe_load(config_path.read_text()) or {}
    group_size = int(((config.get("pool") or {}).get("group_size")) or 1)
    journal = read_json_lines(run_dir / "pool.journal.jsonl")
    metrics = read_json_lines(run_dir / "metrics.jsonl")
    return audit_history(journal, metrics, group_size=group_size, eval_items=eval_items)


def format_report(report: AuditReport, run_dir: str | Path) -> str:
    lines = [f"{run_dir}: {'history holds' if report.ok else f'{len(report.violations)} violation(s)'}"]
    lines += [f"  checked {k}: {v}" for k, v in report.checked.items()]
    lines += [f"  VIOLATION {v}" for v in report.violations]
    lines += [f"  note: {n}" for n in report.notes]
    return "\n".join(lines)

