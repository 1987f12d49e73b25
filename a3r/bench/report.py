"""The benchmark report: `report.md` (figures as PNG files beside it) and a self-contained `report.html`
(the same figures embedded as base64), plus `report.json` for other tools.

Contents: the verdict for the newest commit (from `check` when one ran, else a plain comparison of the
two newest measured commits), the benchmark x commit heatmap, per-benchmark history plots with change
points, the regression table (effect, interval, p-value, minimum effect, verdict, confirmed), the change
points, provenance per commit (sha, subject, hosts, versions, load average, runs) and failed runs.
Every number comes from the store.
"""

from __future__ import annotations

import base64
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, PackageLoader, StrictUndefined

from a3r.bench import figures
from a3r.bench.check import (
    CheckResult,
    Finding,
    HistoryChange,
    compare_commits,
    history_change_points,
    values_by_cell,
)
from a3r.bench.stats import Verdict, worse_sign
from a3r.bench.store import measurements
from a3r.bench.suite import Suite
from a3r.states import RunState
from a3r.store import Store
from a3r.worker.files import write_bytes_atomic

__all__ = ["BenchReport", "build_report", "write_report"]


@dataclass
class CommitRow:
    sha: str
    subject: str
    time: float
    hosts: list[str]
    versions: list[str]
    load: str
    runs: int

    @property
    def short(self) -> str:
        return self.sha[:10]


@dataclass
class TableRow:
    benchmark: str
    metric: str
    unit: str
    direction: str
    baseline: str
    candidate: str
    delta: str
    rel: str
    p: str
    threshold: str
    verdict: str
    confirmed: str


@dataclass
class BenchReport:
    suite: str
    generated: str
    headline: str
    regressed: bool
    baseline: str
    candidate: str
    commits: list[CommitRow]
    table: list[TableRow]
    changes: list[HistoryChange]
    failed: list[str]
    figures: dict[str, str] = field(default_factory=dict)  # name -> file name


def _num(x: float | None) -> str:
    if x is None or not np.isfinite(x):
        return "n/a"
    return f"{x:.4g}"


def _table(
    findings: list[Finding], confirmed: set[tuple[str, str]], rechecked: set[tuple[str, str]]
) -> list[TableRow]:
    rows = []
    for f in findings:
        c = f.comparison
        key = (f.benchmark, f.metric)
        conf = "yes" if key in confirmed else ("no (rerun disagreed)" if key in rechecked else "-")
        rows.append(
            TableRow(
                f.benchmark,
                f.metric,
                c.unit,
                c.direction.value,
                f"{_num(c.baseline.mean)} (n={c.baseline.n})",
                f"{_num(c.candidate.mean)} (n={c.candidate.n})",
                f"{_num(c.delta.mean)} [{_num(c.delta.lo)}, {_num(c.delta.hi)}]",
                "n/a" if c.rel_delta is None else f"{100 * c.rel_delta:+.1f}%",
                _num(c.p_worse),
                _num(c.threshold),
                c.verdict.value,
                conf if c.verdict is Verdict.REGRESSION else "-",
            )
        )
    return rows


def _failed_runs(store: Store, suite: Suite) -> list[str]:
    try:
        camp = store.get_campaign(f"bench-{suite.name}")
    except KeyError:
        return []
    bad = [RunState.FAILED, RunState.TIMED_OUT, RunState.STALE]
    return [
        f"{r.name} (run {r.id}): {r.state} {r.message}".strip()
        for r in store.runs(campaign_id=camp.id, states=bad)
    ]


def build_report(store: Store, suite: Suite, check_result: CheckResult | None = None) -> BenchReport:
    """Assemble the report's data from the store (and the `check` that just ran, if any)."""
    rows = measurements(store, suite=suite.name)
    round0 = [m for m in rows if m.round == 0]
    commits: dict[str, list] = {}
    for m in round0:
        commits.setdefault(m.commit, []).append(m)
    order = list(commits)
    commit_rows = []
    for sha, ms in commits.items():
        loads = [m.data.get("load_1m") for m in ms if m.data.get("load_1m") is not None]
        versions = sorted({", ".join(f"{k} {v}" for k, v in sorted(m.versions.items())) for m in ms})
        commit_rows.append(
            CommitRow(
                sha,
                ms[0].subject,
                ms[0].commit_time,
                sorted({m.host for m in ms}),
                versions,
                f"{min(loads):.1f}-{max(loads):.1f}" if loads else "n/a",
                len({m.run_id for m in ms}),
            )
        )
    if check_result is not None:
        base, cand, findings = check_result.baseline, check_result.candidate, check_result.findings
        confirmed = {(f.benchmark, f.metric) for f in check_result.confirmed}
        rechecked = {(f.benchmark, f.metric) for f in check_result.suspected}
    elif len(order) >= 2:
        base, cand = order[-2], order[-1]
        findings, confirmed, rechecked = compare_commits(store, suite, base, cand), set(), set()
    else:
        base, cand, findings, confirmed, rechecked = "", order[-1] if order else "", [], set(), set()
    table = _table(findings, confirmed, rechecked)
    regressions = [t for t in table if t.verdict == Verdict.REGRESSION.value]
    if not cand:
        headline = "No measurements yet."
    elif not base:
        headline = f"Only {cand[:10]} is measured: nothing to compare yet."
    elif check_result is not None:
        headline = (
            f"REGRESSION: {cand[:10]} regressed against {base[:10]} on "
            + ", ".join(f"{f.benchmark}/{f.metric}" for f in check_result.confirmed)
            + " (confirmed by rerun)."
            if check_result.regressed
            else f"No confirmed regression of {cand[:10]} against {base[:10]}"
            + (
                f" ({len(check_result.suspected)} suspected, not confirmed by rerun)."
                if check_result.suspected
                else "."
            )
        )
    else:
        headline = (
            f"{len(regressions)} suspected regression(s) of {cand[:10]} against {base[:10]} (not confirmed: run `a3r bench check`)."
            if regressions
            else f"No regression of {cand[:10]} against {base[:10]}."
        )
    return BenchReport(
        suite=suite.name,
        generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        headline=headline,
        regressed=bool(check_result and check_result.regressed),
        baseline=base,
        candidate=cand,
        commits=commit_rows,
        table=table,
        changes=history_change_points(store, suite),
        failed=_failed_runs(store, suite),
    )


def _figures(store: Store, suite: Suite, rep: BenchReport) -> dict[str, bytes]:
    rows = [m for m in measurements(store, suite=suite.name) if m.round == 0]
    cells = values_by_cell(rows)
    order = [c.sha for c in rep.commits]
    labels = [c.short for c in rep.commits]
    if not order:
        return {}
    names, means, better = [], [], []
    for bench in suite.benchmarks:
        for spec in bench.metrics:
            by_commit = cells.get((bench.name, spec.name), {})
            mu = np.array([np.mean(by_commit[c]) if by_commit.get(c) else np.nan for c in order])
            ref = next((v for v in mu if np.isfinite(v)), np.nan)
            rel = (mu - ref) / abs(ref) if np.isfinite(ref) and ref != 0 else np.zeros_like(mu) * mu
            names.append(f"{bench.name} / {spec.name}")
            means.append(mu)
            better.append(-worse_sign(spec.direction) * rel)
    out = {"heatmap.png": figures.heatmap(names, labels, np.array(means), np.array(better))}
    changes = defaultdict(list)
    for ch in rep.changes:
        changes[(ch.benchmark, ch.metric)].append((order.index(ch.commit), ch.regression))
    for bench in suite.benchmarks:
        panels = []
        for spec in bench.metrics:
            by_commit = cells.get((bench.name, spec.name), {})
            if by_commit:
                groups = [by_commit.get(c, []) for c in order]
                panels.append((spec.name, spec.unit, groups, changes[(bench.name, spec.name)]))
        if panels:
            out[f"history-{bench.name}.png"] = figures.history(bench.name, panels, labels)
    return out


def _env(autoescape: bool) -> Environment:
    env = Environment(
        loader=PackageLoader("a3r.bench", "templates"),
        undefined=StrictUndefined,
        autoescape=autoescape,
        keep_trailing_newline=True,
    )
    env.filters["cell"] = lambda s: str(s).replace("|", "\\|").replace("\n", " ").strip()
    env.filters["num"] = _num
    return env


def write_report(
    store: Store, suite: Suite, out_dir: str | Path, check_result: CheckResult | None = None
) -> dict[str, Any]:
    """Build the report and write report.md (+ figures/), report.html and report.json into `out_dir`."""
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    rep = build_report(store, suite, check_result)
    pngs = _figures(store, suite, rep)
    for name, png in pngs.items():
        write_bytes_atomic(out / "figures" / name, png)
    rep.figures = {name: name for name in pngs}
    ctx = {"r": rep, "images": {k: base64.b64encode(v).decode() for k, v in pngs.items()}}
    write_bytes_atomic(out / "report.md", _env(False).get_template("report.md.j2").render(ctx).encode())
    write_bytes_atomic(out / "report.html", _env(True).get_template("report.html.j2").render(ctx).encode())
    summary = {
        "suite": rep.suite,
        "headline": rep.headline,
        "regressed": rep.regressed,
        "baseline": rep.baseline,
        "candidate": rep.candidate,
        "table": [vars(t) for t in rep.table],
        "changes": [
            {
                "benchmark": c.benchmark,
                "metric": c.metric,
                "commit": c.commit,
                "before": c.point.before,
                "after": c.point.after,
                "p": c.point.p_value,
                "regression": c.regression,
            }
            for c in rep.changes
        ],
        "commits": [vars(c) for c in rep.commits],
        "failed": rep.failed,
    }
    write_bytes_atomic(out / "report.json", json.dumps(summary, indent=2).encode())
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "json": str(out / "report.json"),
        "figures": sorted(pngs),
    }
