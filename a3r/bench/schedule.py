"""`a3r bench schedule`: measure the newest commit of a branch every so often, check it, write the report.

The schedule's state is a `BenchSchedule` row in the store (last round's time, commit and outcome), so a
restarted process (after a reboot, or a cron invocation each day) knows when the next round is due and
which commits are measured; nothing lives only in memory. A round:

1. optionally `git fetch`es, then resolves the branch's newest commit;
2. skips it if the suite already measured it;
3. otherwise runs `check` against the newest measured commit (or, on the first round, just measures it);
4. writes the report to `<workspace>/bench/reports/<suite>/` and records the outcome.

For cron, `cron_line` prints the crontab entry that runs one round (`--once`) per period instead.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from a3r.bench.check import CheckResult, check
from a3r.bench.checkout import commit_info
from a3r.bench.report import write_report
from a3r.bench.runner import BenchRunner
from a3r.bench.store import get_schedule, measured_commits, measurements, save_schedule
from a3r.exceptions import A3RError, BenchError
from a3r.store.models import BenchSchedule

__all__ = [
    "RoundOutcome",
    "RoundStatus",
    "cron_line",
    "next_due",
    "parse_every",
    "run_round",
    "run_schedule",
    "schedule_command",
]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_every(text: str) -> float:
    """'24h', '30m', '1d', '90s' or plain seconds -> seconds (at least 60)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    if not m:
        raise ValueError(f"--every takes a duration like 24h, 30m, 1d or 3600 (seconds), got {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds < 60:
        raise ValueError(f"--every must be at least a minute (a suite takes longer than that), got {text!r}")
    return seconds


def next_due(row: BenchSchedule | None, now: float) -> float:
    """When the next round is due: now for a schedule that never ran, else one period after the last."""
    if row is None or row.last_run_at is None:
        return now
    return row.last_run_at + row.every_s


def cron_line(every_s: float, command: str) -> str:
    """A crontab entry running `command` once per period (rounded to what cron can say)."""
    minutes = max(1, round(every_s / 60))
    if minutes < 60:
        spec = f"*/{minutes} * * * *"
    elif minutes < 1440:
        spec = f"0 */{max(1, round(minutes / 60))} * * *"
    else:
        days = max(1, round(minutes / 1440))
        spec = "0 3 * * *" if days == 1 else f"0 3 */{days} * *"
    return f"{spec} {command}"


class RoundStatus(str, Enum):
    MEASURED = "measured"  # the first commit of the suite: nothing to compare with
    OK = "ok"  # checked against the previous measured commit: no confirmed regression
    REGRESSION = "regression"  # a confirmed regression
    SKIPPED = "skipped"  # the newest commit was already measured


@dataclass(frozen=True)
class RoundOutcome:
    status: RoundStatus
    commit: str
    message: str
    report: str | None = None


def run_round(
    runner: BenchRunner, branch: str, *, fetch: bool = False, timeout: float | None = None
) -> RoundOutcome:
    """One scheduled round (see the module docstring)."""
    if fetch:
        import subprocess

        p = subprocess.run(
            ["git", "-C", str(runner.repo), "fetch", "--quiet"], capture_output=True, text=True
        )
        if p.returncode != 0:
            raise BenchError(f"git fetch failed: {p.stderr.strip()}")
    newest = commit_info(runner.repo, branch)
    store, suite = runner.ws.store, runner.suite
    done = measured_commits(store, suite.name)
    if newest.sha in done:
        return RoundOutcome(RoundStatus.SKIPPED, newest.sha, f"{newest.short} is already measured")
    result: CheckResult | None = None
    if done:
        baseline = _commit_of(runner, done[-1])
        result = check(runner, baseline, newest, timeout=timeout)
        status = RoundStatus.REGRESSION if result.regressed else RoundStatus.OK
    else:
        runner.run([newest], timeout=timeout)
        status = RoundStatus.MEASURED
    if not measurements(store, suite=suite.name, commits=[newest.sha]):
        raise BenchError(f"no benchmark of {newest.short} succeeded; see `a3r runs` and `a3r logs`")
    out = runner.paths.reports / suite.name
    paths = write_report(store, suite, out, result)
    msg = {
        RoundStatus.MEASURED: f"measured {newest.short} (first commit of the suite)",
        RoundStatus.OK: f"{newest.short}: no confirmed regression",
        RoundStatus.REGRESSION: f"{newest.short}: confirmed regression",
    }[status]
    return RoundOutcome(status, newest.sha, msg, paths["markdown"])


def _commit_of(runner: BenchRunner, sha: str):
    try:
        return commit_info(runner.repo, sha)
    except BenchError as e:
        raise BenchError(
            f"the last measured commit {sha[:10]} is not in {runner.repo} any more: {e}"
        ) from None


def run_schedule(
    runner: BenchRunner,
    *,
    branch: str,
    every_s: float,
    suite_path: str,
    once: bool = False,
    fetch: bool = False,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> RoundOutcome | None:
    """Run rounds when due, forever (or one round now with `once`); returns the last outcome."""
    store = runner.ws.store
    name = f"{runner.suite.name}@{branch}"
    row = get_schedule(store, name) or BenchSchedule(
        name=name, repo=str(runner.repo), branch=branch, suite_path=suite_path, every_s=every_s
    )
    row.every_s, row.suite_path, row.repo = every_s, suite_path, str(runner.repo)
    save_schedule(store, row)
    last = None
    while True:
        now = time.time()
        due = next_due(row, now)
        if once or now >= due:
            try:
                last = run_round(runner, branch, fetch=fetch, timeout=timeout)
                row.last_commit, row.last_status = last.commit, last.status.value
                runner.say(
                    f"[bench schedule] {last.message}" + (f"; report {last.report}" if last.report else "")
                )
            except (A3RError, TimeoutError) as e:  # a failed round is recorded; the schedule goes on
                row.last_status = f"error: {e}"[:500]
                runner.say(f"[bench schedule] round failed: {e}")
                if once:
                    row.last_run_at = now
                    save_schedule(store, row)
                    raise
            row.last_run_at = now
            save_schedule(store, row)
            if once:
                return last
            due = next_due(row, time.time())
        sleep(max(1.0, min(due - time.time(), 300.0)))  # wake often enough to notice a changed clock


def schedule_command(workspace: Path, repo: Path, branch: str, suite_path: str | None = None) -> str:
    """The shell command a cron entry runs for one round (paths quoted; cron's PATH is minimal, so the
    interpreter is absolute)."""
    q = shlex.quote
    suite = f" --suite {q(suite_path)}" if suite_path else ""
    log = q(str(workspace / "bench" / "schedule.log"))
    return (
        f"cd {q(str(repo))} && {q(sys.executable)} -m a3r --workspace {q(str(workspace))} bench schedule "
        f"--once --branch {q(branch)}{suite} >> {log} 2>&1"
    )
