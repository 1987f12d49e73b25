"""The dashboard's HTTP surface (FastAPI): HTML pages, the JSON API they poll, and CSV/JSON export.

Pages are server-rendered shells (jinja2, autoescaped) that load vendored ECharts and one small script
each; the scripts fetch the JSON API and build the page with DOM text nodes, never HTML strings. Every
route is a GET: nothing here can change a store (which is open read-only anyway) or a swarm server.
Errors are JSON `{"error": {"message", "status"}}` with a 4xx code that says what was wrong.
"""

from __future__ import annotations

import csv
import io
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader

from a3r.dashboard.bench import bench_view
from a3r.dashboard.bench_reports import HOW_TO_PRODUCE, bench_reports, search_patterns
from a3r.dashboard.compare import Summary
from a3r.dashboard.config import DashboardConfig
from a3r.dashboard.queries import (
    campaign_summaries,
    compare_view,
    config_diff,
    metric_export_rows,
    run_detail,
    run_table,
)
from a3r.dashboard.security import install_security
from a3r.dashboard.sources import Sources
from a3r.dashboard.swarm import SwarmProxy, UpstreamError
from a3r.exceptions import NotFound

__all__ = ["create_app", "parse_since"]

STATIC = Path(__file__).with_name("static")
MAX_RUNS_PER_QUERY = 500
_PAGES = Environment(loader=PackageLoader("a3r.dashboard", "templates"), autoescape=True)


class BadQuery(ValueError):
    """A query parameter the dashboard cannot use (the message says which and why)."""


# SQLite's integers are signed 64-bit: a bigger id cannot name a row (and overflows the driver: a 500).
SQLITE_MAX_INT = 2**63 - 1
RowId = Annotated[int, Query(ge=0, le=SQLITE_MAX_INT, description="a row id of the store")]


def parse_since(text: str) -> dict[int, int | None]:
    """`"3:10,4,5:-1"` -> {3: 10, 4: None, 5: -1}: runs, each with the last step the caller already has."""
    out: dict[int, int | None] = {}
    for item in filter(None, text.split(",")):
        rid, _, step = item.partition(":")
        try:
            out[int(rid)] = int(step) if step else None
            if not all(abs(v) <= SQLITE_MAX_INT for v in (int(rid), out[int(rid)] or 0)):
                raise ValueError("out of SQLite's integer range")
        except ValueError:
            raise BadQuery(f"runs={text!r}: expected run ids, each optionally ':<last step seen>'") from None
    if not out:
        raise BadQuery("runs is empty: give one or more run ids, e.g. runs=3:10,4")
    if len(out) > MAX_RUNS_PER_QUERY:
        raise BadQuery(f"runs names {len(out)} runs; ask for at most {MAX_RUNS_PER_QUERY} at once")
    return out


def _csv(rows: list[dict[str, Any]]) -> str:
    """Rows as CSV. Text cells that a spreadsheet would run as a formula get a leading quote."""
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for row in rows for k in row))
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow(
            {k: ("'" + v if isinstance(v, str) and v and v[0] in "=+-@\t\r" else v) for k, v in row.items()}
        )
    return buf.getvalue()


def _flat_run_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    keep = (
        "id",
        "name",
        "stage",
        "state",
        "seed",
        "attempts",
        "host",
        "metric",
        "step",
        "steps",
        "last",
        "best",
    )
    return [
        {k: r[k] for k in keep} | {f"config.{k}": v for k, v in r["config"].items()} for r in table["rows"]
    ]


def report_dir(reports_dir: Path, campaign: str) -> Path | None:
    """`<reports_dir>/<campaign>` when it holds a report (a campaign name can never lead outside it)."""
    if campaign in ("", ".", "..") or "/" in campaign or "\\" in campaign:
        return None  # only a plain name is a folder of reports_dir
    base = reports_dir.resolve()
    d = (base / campaign).resolve()
    if d.parent != base or not (d / "report.html").is_file():
        return None
    return d


def report_summary(d: Path) -> dict[str, Any]:
    """The answer of a report folder's `report.json` and its arms with their run ids (empty when the
    file is missing or unreadable: the HTML report is still shown)."""
    try:
        data = json.loads((d / "report.json").read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    arms = [
        {k: arm.get(k) for k in ("label", "n", "mean", "lo", "hi", "status", "run_ids")}
        for arm in (data.get("arms") if isinstance(data.get("arms"), list) else [])
        if isinstance(arm, dict)
    ]
    return {"answer": data.get("answer"), "conclusive": data.get("conclusive"), "arms": arms}


def create_app(cfg: DashboardConfig) -> FastAPI:
    """The dashboard as an ASGI app over the stores under `cfg.workspace` and the servers in `cfg.swarm`."""
    sources = Sources(cfg.workspace, cfg.db)
    swarm = SwarmProxy(cfg.swarm)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        sources.close()

    app = FastAPI(title="a3r dashboard", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.sources = sources
    install_security(app, cfg)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    # -- errors ---------------------------------------------------------------------------------------
    def _error(request: Request, status: int, message: str) -> Response:
        """JSON for the API; a page saying what went wrong for a browser's page request."""
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": {"message": message, "status": status}}, status_code=status)
        body = _PAGES.get_template("error.html").render(
            title=f"Error {status}",
            page="error",
            data={},
            refresh_ms=0,
            servers=swarm.listing(),
            status=status,
            message=message,
        )
        return HTMLResponse(body, status_code=status)

    @app.exception_handler(NotFound)
    async def _nf(request: Request, e: NotFound):
        return _error(request, 404, str(e))

    @app.exception_handler(BadQuery)
    async def _bad(request: Request, e: BadQuery):
        return _error(request, 400, str(e))

    @app.exception_handler(UpstreamError)
    async def _up(request: Request, e: UpstreamError):
        return _error(request, 502, str(e))

    @app.exception_handler(RequestValidationError)
    async def _val(request: Request, e: RequestValidationError):
        parts = [
            f"{'.'.join(str(p) for p in err['loc'] if p != 'query')}: {err['msg']}" for err in e.errors()
        ]
        return _error(request, 400, "; ".join(parts) or "invalid request")

    # -- pages ----------------------------------------------------------------------------------------
    def page(name: str, title: str, **data: Any) -> HTMLResponse:
        body = _PAGES.get_template(f"{name}.html").render(
            title=title, page=name, data=data, refresh_ms=int(cfg.refresh_s * 1000), servers=swarm.listing()
        )
        return HTMLResponse(body)

    @app.get("/", response_class=HTMLResponse)
    def index_page():
        return page("index", "Campaigns")

    @app.get("/campaign", response_class=HTMLResponse)
    def campaign_page(ws: str, id: RowId):
        camp = sources.get(ws).store.get_campaign(id)
        return page("campaign", camp.name, ws=ws, id=id)

    @app.get("/run", response_class=HTMLResponse)
    def run_page(ws: str, id: RowId):
        run = sources.get(ws).store.get_run(id)
        return page("run", run.name, ws=ws, id=id)

    def _report_of(ws: str, id: int) -> tuple[Any, Path]:
        camp = sources.get(ws).store.get_campaign(id)
        d = report_dir(cfg.reports_dir, camp.name)
        if d is None:
            raise NotFound(f"campaign {camp.name!r} has no report in {cfg.reports_dir}/{camp.name}/ yet")
        return camp, d

    @app.get("/report", response_class=HTMLResponse)
    def report_page(ws: str, id: RowId):
        camp, _d = _report_of(ws, id)
        return page("report", f"Report of {camp.name}", ws=ws, id=id)

    @app.get("/report/raw")
    def report_raw(ws: str, id: RowId):
        _camp, d = _report_of(ws, id)
        # the report is self-contained HTML: shown sandboxed, with no script and nothing fetched
        headers = {
            "Content-Security-Policy": "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"
        }
        return HTMLResponse((d / "report.html").read_text(), headers=headers)

    @app.get("/swarm", response_class=HTMLResponse)
    def swarm_page(s: int = 0):
        return page("swarm", "Swarm server", index=s, url=swarm.target(s).url)

    @app.get("/bench", response_class=HTMLResponse)
    def bench_page():
        return page("bench", "Benchmarks")

    # -- JSON API -------------------------------------------------------------------------------------
    @app.get("/api/overview")
    def overview():
        """Every campaign of every store, the stores found (with why one cannot be read) and the servers."""
        found = sources.all()
        campaigns = []
        for src in found:
            if src.store is not None:
                for c in campaign_summaries(src):
                    d = report_dir(cfg.reports_dir, c["name"])
                    c["report"] = d is not None
                    if d is not None:
                        summary = report_summary(d)
                        c["answer"], c["conclusive"] = summary["answer"], summary["conclusive"]
                        if c["status"] == "idle":
                            c["status"] = "finished"
                    campaigns.append(c)
        return {
            "workspace": str(sources.root),
            "sources": [{"ws": s.key, "db": str(s.db_path), "error": s.error} for s in found],
            "campaigns": campaigns,
            "servers": swarm.listing(),
        }

    @app.get("/api/campaign")
    def campaign(ws: str, id: RowId):
        """The run table of one campaign, with its stage progress and report summary."""
        src = sources.get(ws)
        table = run_table(src, id, time.time())
        summary = next(c for c in campaign_summaries(src) if c["id"] == id)
        d = report_dir(cfg.reports_dir, summary["name"])
        return table | {"summary": summary, "report": report_summary(d) if d is not None else None}

    @app.get("/api/report")
    def report(ws: str, id: RowId):
        """The report's answer and arms (run ids), for the report page around the sandboxed HTML."""
        camp, d = _report_of(ws, id)
        return {"campaign": {"ws": ws, "id": camp.id, "name": camp.name}} | report_summary(d)

    @app.get("/api/run")
    def run(ws: str, id: RowId):
        src = sources.get(ws)
        detail = run_detail(src, id, time.time())
        detail["report"] = report_dir(cfg.reports_dir, detail["campaign"]["name"]) is not None
        return detail

    @app.get("/api/compare")
    def compare(ws: str, id: RowId, metric: str = Query(min_length=1), summary: Summary = Summary.FINAL):
        """Each run's `summary` of `metric` against the varied config values, with t intervals and
        parameter importance (see `a3r.dashboard.compare`)."""
        src = sources.get(ws)
        src.store.get_campaign(id)  # NotFound for a campaign that does not exist
        return compare_view(src, id, metric, summary)

    @app.get("/api/diff")
    def diff(ws: str, a: RowId, b: RowId):
        """The effective configs of runs `a` and `b` side by side, and which keys differ."""
        return config_diff(sources.get(ws), a, b)

    @app.get("/api/metrics")
    def metrics(ws: str, name: str = Query(min_length=1), runs: str = Query(min_length=1)):
        """Points of metric `name` for `runs` ("3:10,4": run 3 after step 10, all of run 4)."""
        since = parse_since(runs)
        series = sources.get(ws).store.metric_series_since(name, since)
        return {"name": name, "series": {str(rid): points for rid, points in series.items()}}

    @app.get("/api/export/{what}.{fmt}")
    def export(what: str, fmt: str, ws: str, id: RowId):
        """The run table (`runs`) or every metric point (`metrics`) of a campaign, as CSV or JSON."""
        if what not in ("runs", "metrics") or fmt not in ("csv", "json"):
            raise NotFound(f"no export {what}.{fmt}; use runs.csv, runs.json, metrics.csv or metrics.json")
        src = sources.get(ws)
        name = src.store.get_campaign(id).name
        rows = (
            _flat_run_rows(run_table(src, id, time.time())) if what == "runs" else metric_export_rows(src, id)
        )
        filename = f"{name}-{what}.{fmt}".replace('"', "")
        headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
        if fmt == "json":
            return JSONResponse(rows, headers=headers)
        return Response(_csv(rows), media_type="text/csv; charset=utf-8", headers=headers)

    @app.get("/api/bench")
    def bench():
        """Raw results from the stores, written bench reports, and how to produce either."""
        found = sources.all()
        view = bench_view(src.store for src in found if src.store is not None)
        workspaces = [src.db_path.parent.parent for src in found]
        return view | {
            "reports": bench_reports(cfg.reports_dir, workspaces, sources.root),
            "how_to": HOW_TO_PRODUCE,
            "looked": search_patterns(cfg.reports_dir),
        }

    @app.get("/api/swarm/{index}/status")
    async def swarm_status(index: int):
        return await swarm.status(index)

    @app.get("/api/swarm/{index}/episodes")
    async def swarm_episodes(index: int, limit: int = Query(20, ge=1, le=200)):
        return await swarm.episodes(index, limit)

    return app
