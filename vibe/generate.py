"""`vibe new` with an LLM endpoint: the coding LLM writes the client folder, `vibe check` judges it, and
the failed checks with their error tails go back to the LLM for a bounded number of repair rounds.

Every round is kept under DIR/.vibe/rounds/round-N/: the files the LLM wrote (files.json), the unified
diff against the previous round (diff.patch), its notes, and the check report (check.json, check.txt),
so a person can see what changed and why. The LLM answers in one JSON object
{"files": {relative path: full content}, "notes": "..."}; a repair answer lists only the files it changes.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from a3r.leader.endpoint import Endpoint, JsonChat
from a3r.leader.llm import load_skills
from vibe import layout
from vibe.check import check
from vibe.data_writer import write_data
from vibe.exceptions import LayoutError
from vibe.flags import Report, Severity, Stage
from vibe.layout import DATA_FILES, STATE_DIR, ClientDir
from vibe.new import prepare_out
from vibe.templates import TEMPLATES_DIR

__all__ = ["FilesSpec", "GenerateResult", "generate"]


class FilesSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: dict[str, str] = Field(description="Relative path -> full file content (only changed files in a repair).")
    notes: str = Field("", description="What was written or changed, and why.")


@dataclass
class GenerateResult:
    report: Report
    rounds: list[Path] = field(default_factory=list)


def _example() -> str:
    root = TEMPLATES_DIR / "qa"
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(root.iterdir()) if p.is_file())


def system_prompt(skills: str | None = None) -> str:
    return (
        "You write training clients for the swarm RL engine. Reply with exactly one JSON object "
        '{"files": {"<relative path>": "<full content>"}, "notes": "<what and why>"} and nothing else.\n\n'
        f"The client folder layout contract (vibe.layout):\n{layout.__doc__}\n"
        "Do not write data/*.jsonl: they are generated from make_data.generate(seed). The agent loop uses the "
        "OpenAI SDK client it is given (tools where the task needs them). Rewards must not pay for empty "
        "answers, garbage, an echo of the prompt or another player's words: `vibe check` probes exactly that.\n\n"
        f"An example client (the single-turn QA template):\n{_example()}\n\n"
        f"Project skills:\n{load_skills() if skills is None else skills}"
    )


def _safe_paths(spec: FilesSpec) -> FilesSpec:
    """Reject paths that would write outside the folder or into vibe's own state."""
    if not spec.files:
        raise ValueError("files is empty: give at least one file")
    for rel in spec.files:
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] == STATE_DIR or "\\" in rel:
            raise ValueError(f"file path {rel!r} must be relative, inside the folder and outside {STATE_DIR}/")
        if rel in DATA_FILES:
            raise ValueError(f"do not write {rel}: it is generated from make_data.generate(seed)")
    return spec


def _diff(before: dict[str, str], after: dict[str, str]) -> str:
    out = []
    for rel in sorted(before.keys() | after.keys()):
        a, b = before.get(rel, ""), after.get(rel, "")
        if a != b:
            out += difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"a/{rel}", f"b/{rel}")
    return "".join(out)


def _failure_text(report: Report) -> str:
    parts = [report.render()]
    for f in report.errors:
        tb = f.detail.get("traceback")
        if tb:
            parts.append(f"Traceback tail of {f.code}:\n{tb}")
    return "\n".join(parts)


def _apply_and_check(cd: ClientDir, spec: FilesSpec) -> Report:
    for rel, text in spec.files.items():
        path = cd.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    try:
        write_data(cd)
    except LayoutError as e:
        report = Report(client=str(cd.root))
        report.add(Stage.LAYOUT, "data_failed", Severity.ERROR, str(e))
        report.write(cd.state_dir)
        return report
    return check(cd.root)


def generate(
    prompt: str, out: Path, endpoint: Endpoint, *, rounds: int = 3, echo: Callable[[str], None] = print,
    skills: str | None = None,
) -> GenerateResult:
    """Write a client for `prompt` into `out` with the LLM, then repair it up to `rounds` times."""
    cd = ClientDir.open(prepare_out(out))
    chat = JsonChat(endpoint, system_prompt(skills), echo=echo)
    result = GenerateResult(report=Report(client=str(cd.root)))
    ask = f"Write the client folder for this task:\n{prompt}"
    for n in range(rounds + 1):
        before = {k: v for k, v in cd.source_files().items() if k not in DATA_FILES}
        spec = chat.ask(ask, FilesSpec, _safe_paths)
        report = _apply_and_check(cd, spec)
        after = {k: v for k, v in cd.source_files().items() if k not in DATA_FILES}
        rdir = cd.state_dir / "rounds" / f"round-{n}"
        rdir.mkdir(parents=True, exist_ok=True)
        (rdir / "files.json").write_text(json.dumps(spec.files, indent=2))
        (rdir / "diff.patch").write_text(_diff(before, after))
        (rdir / "notes.txt").write_text(spec.notes + "\n")
        report.write(rdir)
        result.rounds.append(rdir)
        result.report = report
        echo(f"round {n}: {'check passed' if report.passed else f'{len(report.errors)} error(s)'} ({rdir})")
        if report.passed:
            break
        current = "\n".join(f"--- {k}\n{v}" for k, v in after.items() if not k.startswith(STATE_DIR))
        ask = (
            f"The task:\n{prompt}\n\nThe client as it is now:\n{current}\n\n`vibe check` failed:\n"
            f"{_failure_text(report)}\n\nFix the cause. Reply with only the files you change (full content)."
        )
    return result
