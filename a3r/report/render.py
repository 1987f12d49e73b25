"""Write a campaign report: `report.md` (figures as PNG files beside it) and a self-contained `report.html`
(the same figures embedded as base64 PNG), both rendered by jinja2 from a `ReportData`."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from a3r.analysis import fmt
from a3r.leader.design import arm_label
from a3r.leader.observe import RunRecord
from a3r.report.data import ArmRow, ReportData
from a3r.report.figures import learning_curves, score_vs_variable

__all__ = ["render_report", "write_report"]


def _num(x: Any) -> str:
    return "-" if x is None else fmt(x)


def _cell(text: Any) -> str:
    """Safe inside a Markdown table cell: no pipes, no line breaks."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _ci(a: ArmRow) -> str:
    return f"[{fmt(a.lo)}, {fmt(a.hi)}]" if a.lo is not None and a.hi is not None else f"n/a ({a.n} seed)"


def _gci(a: ArmRow) -> str:
    return (
        f"[{fmt(a.gain_lo)}, {fmt(a.gain_hi)}]" if a.gain_lo is not None and a.gain_hi is not None else "n/a"
    )


def _env(autoescape: bool) -> Environment:
    env = Environment(
        loader=PackageLoader("a3r.report", "templates"),
        undefined=StrictUndefined,
        autoescape=autoescape,
        trim_blocks=False,
        keep_trailing_newline=True,
    )
    env.filters["num"] = _num
    env.filters["cell"] = _cell
    env.globals["ci"] = _ci
    env.globals["gci"] = _gci
    return env


_MD, _HTML = _env(False), _env(True)


def render_report(data: ReportData, images: dict[str, str]) -> tuple[str, str]:
    """(markdown, html) text; `images` maps figure file name -> base64 PNG for the HTML."""
    level = f"{100 * data.evidence.question.level:.4g}%"
    ctx = {"d": data, "images": images, "level": level, "label": lambda a: arm_label(data.goal, a.x, a.level)}
    return _MD.get_template("report.md.j2").render(ctx), _HTML.get_template("report.html.j2").render(ctx)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_report(data: ReportData, records: list[RunRecord], out_dir: str | Path) -> dict[str, Any]:
    """Draw the figures, render both files into `out_dir` and return their paths."""
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    pngs: dict[str, bytes] = {}
    for view in data.stages:
        obs = [r.obs for r in records if r.obs.stage == view.index]
        if any(v is not None for o in obs for _s, v in o.series):
            view.figure = f"stage-{view.index}-curves.png"
            pngs[view.figure] = learning_curves(obs, data.goal, f"Stage {view.index}: learning curves")
    if data.final_arms:
        data.figures["score"] = "score-vs-variable.png"
        pngs[data.figures["score"]] = score_vs_variable(data.evidence, data.goal)
    for name, png in pngs.items():
        _write(out / "figures" / name, png)
    md, html = render_report(data, {k: base64.b64encode(v).decode() for k, v in pngs.items()})
    _write(out / "report.md", md.encode())
    _write(out / "report.html", html.encode())
    _write(out / "report.json", json.dumps(report_summary(data), indent=2, default=str).encode())
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "json": str(out / "report.json"),
        "figures": sorted(pngs),
    }


def report_summary(data: ReportData) -> dict[str, Any]:
    """The answer as data for other tools (benchmarks compare it with a direct sweep): the verdict, whether
    it is conclusive, the answer value per level, the untrained level and every arm's numbers."""
    ev = data.evidence
    levels = []
    for le in ev.levels:
        answer = None
        if le.threshold is not None and le.threshold.answer is not None:
            answer = le.threshold.answer.x
        elif le.compare is not None and le.compare.winner is not None:
            answer = le.compare.winner.x
        elif le.best is not None and le.best.best is not None:
            answer = le.best.best.x
        levels.append(
            {"level": le.level, "answer": answer, "conclusive": le.conclusive, "verdict": le.verdict}
        )
    return {
        "campaign": data.campaign,
        "goal": data.goal.text,
        "shape": data.goal.shape,
        "answer": ev.answer,
        "conclusive": ev.conclusive,
        "nothing_trains": ev.nothing_trains,
        "untrained": ev.untrained.as_dict() if ev.untrained else None,
        "levels": levels,
        "arms": [dataclasses.asdict(a) for a in data.final_arms],
        "calibration": data.calibration,
        "stages": [
            {
                "index": v.index,
                "kind": v.design.kind,
                "runs": v.design.n_runs,
                "eta_s": v.eta_s,
                "actual_s": v.actual_s,
            }
            for v in data.stages
        ],
    }
