"""`vibe check DIR`: the validation report of a client folder.

Stages run in order and stop at the first that finds an error, since later ones need earlier ones to
hold (no dry run of a client that does not import): layout, dataset, static (pyflakes: undefined names and
syntax errors; then imports and the contract's functions, in a sandboxed subprocess) with the reward probes, the
whole-loop probes (the client's own run() against a scripted model, vibe.loop_probes), the dry run, and one
training step. The report goes to DIR/.vibe/check.json (and check.txt), tagged with a hash of the sources so `vibe train`
knows whether it still describes the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from engine.errors import ConfigError
from engine.rewards.judge import JudgeMisconfigured, LLMJudge
from vibe.config import VibeJob
from vibe.data_writer import stale_data
from vibe.dataset_checks import check_tasks
from vibe.exceptions import LayoutError, VibeError
from vibe.flags import Flag, Report, Severity, Stage
from vibe.jsonl import read_jsonl
from vibe.judge_link import judge_access
from vibe.judge_probes import add_judge_flags, probe_judge
from vibe.layout import CONFIG_FILE, DATA_FILES, ClientDir
from vibe.loop_probes import loop_probes
from vibe.sandbox import SandboxLimits, limits_note, run_sandboxed, sandbox_unavailable
from vibe.static import static_check

__all__ = ["REPORT_FILE", "check", "load_report", "source_hash"]

REPORT_FILE = "check.json"
JUDGE_PROBE_TASKS = 4  # (prompt, gold) pairs the judge's hack probes grade: 4 x 4 judge calls


def source_hash(cd: ClientDir) -> str:
    h = hashlib.sha256()
    for rel, text in cd.source_files().items():
        h.update(rel.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16]


def load_report(cd: ClientDir) -> Report | None:
    path = cd.state_dir / REPORT_FILE
    return Report.read(path) if path.is_file() else None


def check(path: str | Path, *, dry_run: bool = True) -> Report:
    """Validate the client folder at `path` and write the report into it; never raises for client faults."""
    cd = ClientDir.open(path)
    report = Report(client=str(cd.root), source_hash=source_hash(cd))
    try:
        _run(cd, report, dry_run)
    finally:
        report.write(cd.state_dir)
    return report


def _run(cd: ClientDir, report: Report, dry_run: bool) -> None:
    report.stages_run.append(Stage.LAYOUT)
    missing = cd.missing()
    if missing:
        report.add(Stage.LAYOUT, "missing_files", Severity.ERROR,
                   f"missing {', '.join(missing)}; a client folder needs the files listed in vibe.layout")
        return
    try:
        job = VibeJob.load(cd.path(CONFIG_FILE))
    except LayoutError as e:
        report.add(Stage.LAYOUT, "bad_config", Severity.ERROR, str(e))
        return
    with contextlib.ExitStack() as stack:
        try:
            judge = stack.enter_context(judge_access(job.judge))
        except ConfigError as e:  # the judge's key is not in the environment
            report.add(Stage.LAYOUT, "judge_unavailable", Severity.ERROR, f"the LLM judge cannot start: {e}")
            return
        _run_with_job(cd, job, report, dry_run, judge)


def _probe_judge(judge: LLMJudge, train: list[dict], report: Report) -> None:
    """The hacks a judge may pay for (padding, self-praise, the rubric's words), with the golds of the first
    training tasks as the honest replies; run here, on the trusted side, before any client code."""
    report.stages_run.append(Stage.PROBES)
    pairs = [(t["prompt"], t["gold"]) for t in train[:JUDGE_PROBE_TASKS]]
    try:
        add_judge_flags(probe_judge(judge, pairs), report)
    except JudgeMisconfigured as e:
        report.add(Stage.PROBES, "judge_unavailable", Severity.ERROR, f"the LLM judge refuses every request: {e}")
    report.stats["judge"] = dict(judge.counts)


def _run_with_job(cd: ClientDir, job: VibeJob, report: Report, dry_run: bool, judge: LLMJudge | None) -> None:
    report.stages_run.append(Stage.DATASET)
    (train, p1), (test, p2) = (read_jsonl(cd.path(f)) for f in DATA_FILES)
    for problem in p1 + p2:
        report.add(Stage.DATASET, "bad_jsonl", Severity.ERROR, problem)
    check_tasks(train, test, max(job.swarm.pool.batch_size, job.check.tasks), job.swarm.pool.group_size, report)
    if report.errors:
        return
    if judge is not None:
        _probe_judge(judge, train, report)
        if report.errors:
            return

    report.stages_run += [s for s in (Stage.STATIC, Stage.PROBES) if s not in report.stages_run]
    static_check(cd.root, report)
    if report.errors:
        return
    why = sandbox_unavailable()
    if why:
        report.add(Stage.STATIC, "sandbox_unavailable", Severity.ERROR,
                   f"client code runs only in the sandbox, and there is none here: {why}; the client is not checked")
        return
    limits = SandboxLimits(job.check.timeout_s, job.check.memory_mb)
    res = run_sandboxed("vibe.children.import_and_probe", [str(cd.root), "--limits", job.probe_limits().model_dump_json()],
                        root=cd.root, name="probe", limits=limits)
    if res.result is None:
        why = f"timed out after {job.check.timeout_s}s" if res.timed_out else f"exited with code {res.returncode}"
        report.add(Stage.STATIC, "sandbox_failed", Severity.ERROR,
                   f"importing and probing the client {why} ({limits_note(limits)}); log tail:\n{res.log_tail}")
        return
    report.flags += [Flag.model_validate(f) for f in res.result["flags"]]
    report.stats |= res.result["stats"]
    if report.errors:
        return
    try:
        stale = stale_data(cd)
    except VibeError as e:
        report.add(Stage.DATASET, "make_data_fails", Severity.ERROR, str(e))
        return
    if stale:
        report.add(Stage.DATASET, "data_stale", Severity.ERROR, stale)
        return
    report.stages_run.append(Stage.LOOP_PROBES)
    loop_probes(cd.root, job, train, report)
    if report.errors or not dry_run:
        return

    from vibe.dryrun import dry_run as run_dry

    report.stages_run.append(Stage.DRY_RUN)
    run_dry(cd, job, report)
