"""The validation report: structured flags, each one clear message, grouped by check stage."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class Severity(str, Enum):
    ERROR = "error"  # the client cannot train as it is: `vibe train` refuses it
    WARNING = "warning"  # it can train, but something is likely wrong
    INFO = "info"  # a measurement worth seeing (reward statistics)


class Stage(str, Enum):
    LAYOUT = "layout"
    STATIC = "static"
    DATASET = "dataset"
    PROBES = "probes"
    LOOP_PROBES = "loop_probes"
    DRY_RUN = "dry_run"
    TRAIN_STEP = "train_step"


class Flag(BaseModel):
    """One finding. `code` is stable (tests and the repair loop key on it); `message` says what to fix."""

    stage: Stage
    code: str
    severity: Severity
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)


class Report(BaseModel):
    """Everything one `vibe check` found, plus the measurements (reward statistics) it made."""

    client: str
    flags: list[Flag] = Field(default_factory=list)
    stats: dict[str, Any] = Field(default_factory=dict)
    stages_run: list[Stage] = Field(default_factory=list)
    source_hash: str = ""

    @property
    def passed(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Flag]:
        return [f for f in self.flags if f.severity is Severity.ERROR]

    def add(self, stage: Stage, code: str, severity: Severity, message: str, **detail: Any) -> None:
        self.flags.append(Flag(stage=stage, code=code, severity=severity, message=message, detail=detail))

    def codes(self, severity: Severity | None = None) -> set[str]:
        return {f.code for f in self.flags if severity is None or f.severity is severity}

    def render(self) -> str:
        """Human-readable text: verdict, then flags by stage, then the reward statistics."""
        verdict = "PASSED" if self.passed else f"FAILED ({len(self.errors)} error(s))"
        lines = [f"vibe check {self.client}: {verdict}"]
        for f in self.flags:
            lines.append(f"  [{f.severity.value:7}] {f.stage.value}/{f.code}: {f.message}")
        comps = self.stats.get("components")
        if comps:
            lines.append("  reward components in the dry run (mean, std):")
            lines += [f"    {k}: {v['mean']:.3f}, {v['std']:.3f}" for k, v in comps.items()]
        return "\n".join(lines)

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "check.json"
        path.write_text(self.model_dump_json(indent=2))
        (directory / "check.txt").write_text(self.render() + "\n")
        return path

    @classmethod
    def read(cls, path: Path) -> Report:
        return cls.model_validate(json.loads(path.read_text()))
