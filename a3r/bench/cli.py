"""`a3r bench ...`: regression benchmarks from the command line.

    a3r bench run      [--suite F] [--commits A..B | --commit X] [--benchmark NAME]... [--env current|venv]
    a3r bench compare  A B [--suite F] [--json]
    a3r bench check    [--commit X] [--baseline Y] [--suite F] [--report]
    a3r bench bisect   GOOD BAD --benchmark NAME --metric NAME [--suite F]
    a3r bench report   [--suite F] [--out DIR]
    a3r bench schedule --every 24h [--branch main] [--once] [--fetch] [--print-cron] [--suite F]

Exit codes (`BenchExit`): 0 no confirmed regression, 1 a confirmed regression (check, schedule --once),
2 no verdict (bad input, git or environment failure, every run of a commit failed), so cron and CI can act.
When `--workspace` is left at its default the workspace is `campaigns/bench-<suite>/`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from enum import IntEnum
from pathlib import Path

__all__ = ["BenchExit", "add_bench_commands"]


class BenchExit(IntEnum):
    OK = 0
    REGRESSION = 1
    ERROR = 2


def _say(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def _setup(args, *, create: bool = True):
    """(workspace, suite, runner) from the common options."""
    from a3r.api import Workspace
    from a3r.bench.checkout import EnvMode, repo_root
    from a3r.bench.runner import BenchRunner
    from a3r.bench.suite import load_suite

    suite = load_suite(args.suite)
    repo = repo_root(args.repo)
    default = args.workspace in (None, ".") and not os.environ.get("A3R_WORKSPACE")
    root = Path("campaigns") / f"bench-{suite.name}" if default else Path(args.workspace)
    ws = Workspace(root, db_path=args.db)
    return ws, suite, BenchRunner(ws, suite, repo, env_mode=EnvMode(args.env), say=_say)


def cmd_run(args) -> int:
    from a3r.bench.checkout import resolve_commits
    from a3r.bench.store import measured_commits

    ws, suite, runner = _setup(args)
    try:
        commits = resolve_commits(runner.repo, commit=args.commit, commits=args.commits)
        _say(
            f"suite {suite.name}: {len(commits)} commit(s) {', '.join(c.short for c in commits)}; workspace {ws.root}"
        )
        runner.run(commits, benchmarks=args.benchmark or None, timeout=args.timeout)
        measured = set(measured_commits(ws.store, suite.name))
    finally:
        ws.close()
    missing = [c.short for c in commits if c.sha not in measured]
    if missing:
        print(
            f"a3r: error: no benchmark succeeded at {', '.join(missing)}; see `a3r --workspace {ws.root} runs`",
            file=sys.stderr,
        )
        return BenchExit.ERROR
    return BenchExit.OK


def _print_findings(findings, *, confirmed=()) -> None:
    conf = {(f.benchmark, f.metric) for f in confirmed}
    for f in findings:
        c = f.comparison
        rel = "" if c.rel_delta is None else f" ({100 * c.rel_delta:+.1f}%)"
        lo = "n/a" if not c.delta.defined else f"[{c.delta.lo:.4g}, {c.delta.hi:.4g}]"
        mark = " CONFIRMED" if (f.benchmark, f.metric) in conf else ""
        print(
            f"  {f.benchmark:<22} {f.metric:<28} {c.baseline.mean:>10.4g} -> {c.candidate.mean:<10.4g} "
            f"{c.delta.mean:+.4g}{rel} {lo}  min effect {c.threshold:.3g}  {c.verdict.value}{mark}"
        )


def cmd_compare(args) -> int:
    from a3r.bench.check import compare_commits
    from a3r.bench.checkout import commit_info

    ws, suite, runner = _setup(args)
    try:
        a, b = commit_info(runner.repo, args.a), commit_info(runner.repo, args.b)
        findings = compare_commits(ws.store, suite, a.sha, b.sha)
    finally:
        ws.close()
    if not findings:
        print(
            f"a3r: error: no metric is measured at both {a.short} and {b.short}; run `a3r bench run --commit` on each",
            file=sys.stderr,
        )
        return BenchExit.ERROR
    if args.json:
        print(json.dumps([{"benchmark": f.benchmark, **f.comparison.as_dict()} for f in findings], indent=2))
    else:
        print(f"{b.short} against {a.short} (suite {suite.name}, alpha {suite.alpha}, {suite.test.value}):")
        _print_findings(findings)
    return BenchExit.OK


def cmd_check(args) -> int:
    from a3r.bench.check import check
    from a3r.bench.checkout import commit_info
    from a3r.bench.report import write_report
    from a3r.bench.store import measured_commits

    ws, suite, runner = _setup(args)
    try:
        cand = commit_info(runner.repo, args.commit or "HEAD")
        if args.baseline:
            base = commit_info(runner.repo, args.baseline)
        else:
            earlier = [s for s in measured_commits(ws.store, suite.name) if s != cand.sha]
            if not earlier:
                print(
                    f"a3r: error: no measured commit to compare {cand.short} with; give --baseline REV "
                    "or measure one first with `a3r bench run --commit REV`",
                    file=sys.stderr,
                )
                return BenchExit.ERROR
            base = commit_info(runner.repo, earlier[-1])
        res = check(runner, base, cand, timeout=args.timeout)
        print(f"{cand.short} against {base.short}:")
        _print_findings(res.findings, confirmed=res.confirmed)
        if args.report:
            paths = write_report(ws.store, suite, runner.paths.reports / suite.name, res)
            print(f"report: {paths['markdown']} and {paths['html']}")
    finally:
        ws.close()
    if not res.findings:
        print("a3r: error: nothing could be compared (did the runs fail? see `a3r runs`)", file=sys.stderr)
        return BenchExit.ERROR
    if res.regressed:
        print(f"REGRESSION confirmed on {len(res.confirmed)} metric(s)")
        return BenchExit.REGRESSION
    print(
        "no confirmed regression"
        + (f" ({len(res.suspected)} suspected, not confirmed by rerun)" if res.suspected else "")
    )
    return BenchExit.OK


def cmd_bisect(args) -> int:
    from a3r.bench.check import bisect_first_bad, compare_commits
    from a3r.bench.checkout import resolve_commits
    from a3r.bench.stats import Verdict

    ws, suite, runner = _setup(args)
    try:
        suite.metric(args.benchmark, args.metric)  # fails early with the valid names
        commits = resolve_commits(runner.repo, commits=f"{args.good}..{args.bad}")
        good = commits[0]
        runner.run([good, commits[-1]], benchmarks=[args.benchmark], timeout=args.timeout)

        def is_bad(sha: str) -> bool:
            c = next(c for c in commits if c.sha == sha)
            runner.run([c], benchmarks=[args.benchmark], timeout=args.timeout)
            f = [
                x
                for x in compare_commits(ws.store, suite, good.sha, sha)
                if (x.benchmark, x.metric) == (args.benchmark, args.metric)
            ]
            bad = bool(f) and f[0].comparison.verdict is Verdict.REGRESSION
            _say(f"{c.short}: {'bad' if bad else 'good'}")
            return bad

        if not is_bad(commits[-1].sha):
            print(
                f"a3r: error: {commits[-1].short} does not regress against {good.short} on {args.benchmark}/{args.metric}; nothing to bisect",
                file=sys.stderr,
            )
            return BenchExit.ERROR
        first, _ = bisect_first_bad([c.sha for c in commits], is_bad)
        c = next(c for c in commits if c.sha == first)
        print(f"first bad commit: {c.sha} {c.subject}")
    finally:
        ws.close()
    return BenchExit.OK


def cmd_report(args) -> int:
    from a3r.bench.report import write_report

    ws, suite, runner = _setup(args)
    try:
        out = Path(args.out) if args.out else runner.paths.reports / suite.name
        paths = write_report(ws.store, suite, out)
    finally:
        ws.close()
    print(f"report: {paths['markdown']} and {paths['html']}")
    return BenchExit.OK


def cmd_schedule(args) -> int:
    from a3r.bench.schedule import RoundStatus, cron_line, parse_every, run_schedule, schedule_command

    every = parse_every(args.every)
    ws, suite, runner = _setup(args)
    suite_path = str(Path(args.suite).resolve()) if args.suite else "default"
    try:
        if args.print_cron:
            cmd = schedule_command(ws.root, runner.repo, args.branch, suite_path if args.suite else None)
            print(cron_line(every, cmd))
            return BenchExit.OK
        out = run_schedule(
            runner,
            branch=args.branch,
            every_s=every,
            suite_path=suite_path,
            once=args.once,
            fetch=args.fetch,
            timeout=args.timeout,
        )
    finally:
        ws.close()
    return BenchExit.REGRESSION if out is not None and out.status is RoundStatus.REGRESSION else BenchExit.OK


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--suite", help="suite YAML (default: the shipped default suite, a3r/bench/suites/default.yaml)"
    )
    p.add_argument(
        "--repo", default=".", help="git checkout of the project whose commits are measured (default .)"
    )
    p.add_argument(
        "--env",
        choices=["current", "venv"],
        default="current",
        help="current: this interpreter runs every commit; venv: one virtualenv per dependency-file hash",
    )
    p.add_argument("--timeout", type=float, help="give up waiting for runs after this many seconds")


def add_bench_commands(sub, parents: list[argparse.ArgumentParser] = ()) -> None:
    """Register `a3r bench` and its subcommands on the `a3r` parser's subparsers; `parents` (the global
    --workspace/--db options) are accepted after each subcommand too."""
    b = sub.add_parser(
        "bench", help="regression benchmarks across commits (run, compare, check, bisect, report, schedule)"
    )
    _add = b.add_subparsers(dest="bench_cmd", required=True)

    class _Sub:  # every subcommand gets the global options
        @staticmethod
        def add_parser(*a, **kw):
            return _add.add_parser(*a, parents=list(parents), **kw)

    bsub = _Sub()

    s = bsub.add_parser("run", help="measure the suite at commits (through the scheduler)")
    _common(s)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--commit", help="one commit (default HEAD)")
    g.add_argument("--commits", help="A..B: A and every first-parent commit after it up to B")
    s.add_argument("--benchmark", action="append", help="only this benchmark (repeatable)")
    s.set_defaults(fn=cmd_run)

    s = bsub.add_parser("compare", help="compare two measured commits, per metric")
    _common(s)
    s.add_argument("a", help="baseline commit")
    s.add_argument("b", help="candidate commit")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_compare)

    s = bsub.add_parser(
        "check", help="measure and compare a commit with its baseline; exit 1 on a confirmed regression"
    )
    _common(s)
    s.add_argument("--commit", help="candidate (default HEAD)")
    s.add_argument("--baseline", help="baseline (default: the newest other measured commit)")
    s.add_argument("--report", action="store_true", help="also write the report")
    s.set_defaults(fn=cmd_check)

    s = bsub.add_parser("bisect", help="find the first commit of GOOD..BAD that regresses one metric")
    _common(s)
    s.add_argument("good")
    s.add_argument("bad")
    s.add_argument("--benchmark", required=True)
    s.add_argument("--metric", required=True)
    s.set_defaults(fn=cmd_bisect)

    s = bsub.add_parser("report", help="write the markdown + html report from the store")
    _common(s)
    s.add_argument("--out", help="directory (default <workspace>/bench/reports/<suite>)")
    s.set_defaults(fn=cmd_report)

    s = bsub.add_parser("schedule", help="run the suite on a branch's newest commit every period")
    _common(s)
    s.add_argument("--every", default="24h", help="period: 24h, 30m, 1d or seconds (default 24h)")
    s.add_argument("--branch", default="main")
    s.add_argument("--once", action="store_true", help="one round now, then exit (what cron runs)")
    s.add_argument("--fetch", action="store_true", help="git fetch before each round")
    s.add_argument(
        "--print-cron", action="store_true", help="print a crontab line for one round per period and exit"
    )
    s.set_defaults(fn=cmd_schedule)


def run_bench_command(args) -> int:
    """Run a bench command; an error the user can act on is one line and exit code 2."""
    from a3r.exceptions import A3RError

    try:
        return int(args.fn(args))
    except (A3RError, ValueError, TimeoutError) as e:
        print(f"a3r: error: {e}", file=sys.stderr)
        return BenchExit.ERROR
