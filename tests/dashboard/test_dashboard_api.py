"""The dashboard's HTTP API in-process (FastAPI TestClient) over a store seeded through its real API."""

from __future__ import annotations

import csv
import io

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from a3r.cli import main as a3r_main
from a3r.dashboard import build_config, create_app
from a3r.dashboard.app import parse_since, report_dir
from a3r.dashboard.bench import bench_matrix
from a3r.exceptions import ConfigError

from .conftest import eval_accuracy, reward

TOKEN = "t" * 24


@pytest.fixture(scope="module")
def client(seeded):
    app = create_app(build_config(workspace=seeded.root, reports_dir=seeded.reports))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


def _ok(client, url):
    r = client.get(url)
    assert r.status_code == 200, (url, r.status_code, r.text[:500])
    return r.json()


def test_overview_lists_every_campaign_of_every_store_with_stage_progress(client, seeded):
    data = _ok(client, "/api/overview")
    assert [s["ws"] for s in data["sources"]] == [".", "campaigns/second"]
    by_name = {c["name"]: c for c in data["campaigns"]}
    assert set(by_name) == {"finished-study", "live-study", "many-runs", "planning-only", "second-study"}
    fin = by_name["finished-study"]
    assert (fin["status"], fin["report"], fin["done"], fin["total"]) == ("finished", True, 6, 6)
    assert [(s["name"], s["done"], s["total"]) for s in fin["stages"]] == [
        ("stage-0", 3, 3),
        ("stage-1", 3, 3),
    ]
    live = by_name["live-study"]
    assert live["status"] == "running" and live["counts"] == {"failed": 1, "pending": 2, "running": 3}
    assert by_name["planning-only"]["status"] == "empty" and by_name["planning-only"]["total"] == 0
    assert (by_name["second-study"]["ws"], by_name["second-study"]["status"]) == (
        "campaigns/second",
        "queued",
    )


def test_run_table_has_varying_config_liveness_and_last_best_values(client, seeded):
    data = _ok(client, f"/api/campaign?ws=.&id={seeded.ids['live']}")
    assert data["columns"] == ["training.lr"], "only the config keys that differ between runs are columns"
    assert data["metrics"] == ["reward", "loss"], "the primary metric first"
    rows = {r["name"]: r for r in data["rows"]}
    assert rows["lr-hi-s1"]["last"] == rows["lr-hi-s1"]["best"] == reward(1, 4, 4)
    assert rows["lr-hi-s1"]["step"] == 4 and rows["lr-hi-s1"]["progress"] == pytest.approx(0.4)
    assert rows["lr-hi-s1"]["steps_done"] == 4, "step k is logged after k steps"
    assert rows["lr-hi-s2"]["attempts"] == 2 and rows["lr-hi-s2"]["state"] == "running"
    assert rows["lr-hi-s4"]["late"] and not rows["lr-hi-s1"]["late"], "liveness comes from heartbeat age"
    assert rows["lr-hi-s3"]["failure_kind"] == "code_error"
    assert rows["lr-lo-s1"]["config"] == {"training.lr": 1e-6} and rows["lr-lo-s1"]["last"] is None
    assert data["report"] is None
    fin = _ok(client, f"/api/campaign?ws=.&id={seeded.ids['finished']}")
    assert fin["report"]["answer"].startswith("The smallest batch size")


def test_metrics_after_a_step_return_only_new_points_and_merge_retries(client, seeded):
    rid, retried = seeded.run("lr-hi-s1"), seeded.run("lr-hi-s2")
    data = _ok(client, f"/api/metrics?ws=.&name=reward&runs={rid}:2,{retried}")
    assert [s for s, _v in data["series"][str(rid)]] == [3, 4]
    assert [s for s, _v in data["series"][str(retried)]] == [0, 1, 2, 3, 4, 5], "attempts 1 and 2 merged"
    assert _ok(client, f"/api/metrics?ws=.&name=reward&runs={rid}:4")["series"][str(rid)] == []


def test_run_detail_has_attempts_retries_log_tail_and_config(client, seeded):
    d = _ok(client, f"/api/run?ws=.&id={seeded.run('lr-hi-s2')}")
    a1, a2 = d["attempts"]
    assert (a1["state"], a1["failure_kind"], a2["retry_of"]) == ("stale", "infrastructure", a1["id"])
    assert a2["fix"] == "infrastructure: resume from checkpoint"
    assert d["config"] == {"pool": {"batch_size": 4}, "training": {"lr": 1e-4}}
    assert d["metrics"] == ["reward", "loss"] and d["stage"]["name"] == "sweep"
    live = _ok(client, f"/api/run?ws=.&id={seeded.run('lr-hi-s1')}")
    assert "live log line" in live["log_tail"], "a running local attempt's log is read from its file"
    failed = _ok(client, f"/api/run?ws=.&id={seeded.run('lr-hi-s3')}")
    assert "ZeroDivisionError" in failed["log_tail"]
    assert [e["kind"] for e in failed["events"]][:2] == ["created", "dispatched"]


def test_exports_as_csv_and_json(client, seeded):
    cid = seeded.ids["many"]
    r = client.get(f"/api/export/runs.csv?ws=.&id={cid}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert 'filename="many-runs-runs.csv"' in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == 60 and set(rows[0]) >= {"id", "state", "last", "best", "config.pool.batch_size"}
    assert _ok(client, f"/api/export/runs.json?ws=.&id={cid}")[0]["state"] == "succeeded"
    points = _ok(client, f"/api/export/metrics.json?ws=.&id={cid}")
    assert len(points) == 60 * 8 * 2 and {p["metric"] for p in points} == {"loss", "reward"}
    live = client.get(f"/api/export/runs.csv?ws=.&id={seeded.ids['live']}").text
    assert ",'," not in live and "=" not in live, "empty cells stay empty; nothing reads as a formula"


def test_every_logged_metric_is_listed_primary_first_by_kind_and_exported(client, seeded):
    cid = seeded.ids["finished"]
    data = _ok(client, f"/api/campaign?ws=.&id={cid}")
    # eval_accuracy and step_time_s are logged but not declared by the blueprint
    assert data["metrics"] == ["reward", "eval_accuracy", "loss", "step_time_s"]
    assert data["metric_kinds"] == {
        "reward": "training",
        "eval_accuracy": "evaluation",
        "loss": "training",
        "step_time_s": "timing",
    }
    points = _ok(client, f"/api/export/metrics.json?ws=.&id={cid}")
    assert {p["metric"] for p in points} == {"reward", "loss", "eval_accuracy", "step_time_s"}
    assert len([p for p in points if p["metric"] == "eval_accuracy"]) == 6 * 2
    run = _ok(client, f"/api/run?ws=.&id={seeded.run('bs2-s1')}")
    assert run["metrics"] == data["metrics"] and run["report"] is True


def test_progress_never_exceeds_the_budget(client, seeded):
    # the finished runs logged eval_accuracy at step 10 of a 10-step budget (the demo's 9/8)
    rows = _ok(client, f"/api/campaign?ws=.&id={seeded.ids['finished']}")["rows"]
    assert {(r["steps_done"], r["steps"], r["progress"]) for r in rows} == {(10, 10, 1.0)}
    live = {r["name"]: r for r in _ok(client, f"/api/campaign?ws=.&id={seeded.ids['live']}")["rows"]}
    assert (live["lr-lo-s1"]["steps_done"], live["lr-lo-s1"]["progress"]) == (0, 0.0), "nothing logged yet"


def test_compare_scores_runs_per_config_value_with_t_intervals_and_importance(client, seeded):
    d = _ok(client, f"/api/compare?ws=.&id={seeded.ids['many']}&metric=reward")
    assert d["params"] == ["pool.batch_size"], "the seed key varies too but is not a setting to compare"
    assert len(d["runs"]) == 60 and d["unscored"] == 0
    by = {g["value"]: g for g in d["by_param"]["pool.batch_size"]}
    finals = [reward(seed, 7, 2) for seed in range(1, 21)]
    assert by[2]["n"] == 20 and by[2]["mean"] == pytest.approx(sum(finals) / 20, abs=1e-9)
    assert by[2]["lo"] < by[2]["mean"] < by[2]["hi"]
    imp = d["importance"]
    assert imp["available"] and imp["rows"][0]["param"] == "pool.batch_size"
    # by hand: final reward = 0.2 + 0.035 bs + 0.01 seed. Between batch sizes: 20 * sum((0.035 bs - 0.16333)^2)
    # over bs in (2, 4, 8) = 0.457333; within: 3 * 1e-4 * sum((seed - 10.5)^2 for seed 1..20) = 3 * 0.0665
    assert imp["rows"][0]["eta_squared"] == pytest.approx(0.457333 / (0.457333 + 0.1995), rel=1e-4)
    assert imp["rows"][0]["p"] < 0.01, "batch size explains far more than a shuffle of it"
    auc = _ok(client, f"/api/compare?ws=.&id={seeded.ids['many']}&metric=reward&summary=auc")
    assert auc["runs"][0]["score"] < d["runs"][0]["score"], "a rising curve's mean level is below its end"
    few = _ok(client, f"/api/compare?ws=.&id={seeded.ids['finished']}&metric=eval_accuracy")
    assert not few["importance"]["available"] and "needs at least 8" in few["importance"]["reason"]
    by = {g["value"]: g for g in few["by_param"]["pool.batch_size"]}
    assert by[8]["scores"] == [eval_accuracy(s, 10, 8) for s in (1, 2, 3)], "final = value at the last step"
    r = client.get(f"/api/compare?ws=.&id={seeded.ids['many']}&metric=reward&summary=median")
    assert r.status_code == 400 and "summary" in r.json()["error"]["message"]


def test_config_diff_of_two_runs(client, seeded):
    a, b = seeded.run("lr-hi-s1"), seeded.run("lr-lo-s1")
    d = _ok(client, f"/api/diff?ws=.&a={a}&b={b}")
    differ = {r["key"]: (r["a"], r["b"]) for r in d["rows"] if not r["same"]}
    assert differ == {"training.lr": (1e-4, 1e-6), "blueprint": ("lr-hi", "lr-lo")}
    assert d["differ"] == 2 and (d["a"]["id"], d["b"]["id"]) == (a, b)
    assert any(r["key"] == "pool.batch_size" and r["same"] for r in d["rows"])
    assert client.get(f"/api/diff?ws=.&a={a}&b=999").status_code == 404


def test_overview_and_report_carry_the_answer_and_the_arms_runs(client, seeded):
    fin = next(c for c in _ok(client, "/api/overview")["campaigns"] if c["name"] == "finished-study")
    assert fin["answer"] == "The smallest batch size that trains is 2." and fin["conclusive"] is True
    rep = _ok(client, f"/api/report?ws=.&id={seeded.ids['finished']}")
    assert rep["campaign"]["name"] == "finished-study"
    assert rep["arms"][0]["run_ids"] == [seeded.run("bs2-s1"), seeded.run("bs2-s2"), seeded.run("bs2-s3")]
    page = client.get(f"/report?ws=.&id={seeded.ids['finished']}")
    assert page.status_code == 200 and "/report/raw?ws=.&amp;id=" in page.text
    raw = client.get(f"/report/raw?ws=.&id={seeded.ids['finished']}")
    assert raw.headers["content-security-policy"].startswith("sandbox") and "report-title" in raw.text


def test_bench_reads_committed_reports_and_says_how_to_produce_results(seeded, tmp_path):
    import shutil
    from pathlib import Path

    committed = Path(__file__).resolve().parents[2] / "reports" / "examples" / "bench-default"
    reports = tmp_path / "reports"
    shutil.copytree(committed, reports / "examples" / "bench-default")
    with TestClient(
        create_app(build_config(workspace=seeded.empty, reports_dir=reports)), base_url="http://127.0.0.1"
    ) as c:
        d = _ok(c, "/api/bench")
        assert d["cells"] == [] and len(d["reports"]) == 1
        rep = d["reports"][0]
        assert (rep["where"], rep["suite"], rep["error"]) == (
            str((reports / "examples/bench-default").resolve()),
            "default",
            "",
        )
        assert rep["headline"].startswith("No regression") and len(rep["table"]) > 0
        (reports / "bench-broken").mkdir()
        (reports / "bench-broken" / "report.json").write_text("{not json")
        broken = next(r for r in _ok(c, "/api/bench")["reports"] if r["where"].endswith("bench-broken"))
        assert broken["error"].startswith("cannot read report.json")
    with TestClient(
        create_app(build_config(workspace=seeded.empty, reports_dir=tmp_path / "none")),
        base_url="http://127.0.0.1",
    ) as c:
        d = _ok(c, "/api/bench")
        assert d["reports"] == [] and d["how_to"] == [
            "a3r bench run --commits BASE..HEAD",
            "a3r bench report",
        ]
        assert all("`" not in line for line in d["how_to"] + d["looked"])


@pytest.mark.parametrize(
    "url, status, words",
    [
        ("/api/campaign?ws=nope&id=1", 404, "no workspace 'nope'"),
        ("/api/campaign?ws=.&id=999", 404, "no campaign 999"),
        ("/api/run?ws=.&id=999", 404, "no run 999"),
        ("/api/run?ws=.&id=abc", 400, "id"),
        ("/api/run?ws=.", 400, "id: Field required"),
        ("/api/metrics?ws=.&name=reward&runs=x", 400, "expected run ids"),
        ("/api/metrics?ws=.&name=reward&runs=" + ",".join(map(str, range(501))), 400, "at most 500"),
        ("/api/export/everything.zip?ws=.&id=1", 404, "runs.csv"),
        ("/api/swarm/0/status", 404, "no swarm server 0"),
        ("/report?ws=.&id=2", 404, "has no report"),
        # ids past SQLite's integer range: a 400 naming the bound, never an OverflowError 500
        *[(f"{route}?ws=.&id={2**63}", 400, "less than or equal to 9223372036854775807")
          for route in ("/campaign", "/run", "/report", "/api/campaign", "/api/run", "/api/report", "/api/export/runs.csv")],
        (f"/api/diff?ws=.&a=1&b={2**63}", 400, "less than or equal to 9223372036854775807"),
        (f"/api/metrics?ws=.&name=reward&runs={2**63}", 400, "expected run ids"),
        (f"/api/metrics?ws=.&name=reward&runs=1:{2**63}", 400, "expected run ids"),
    ],
)
def test_bad_input_gets_a_4xx_with_the_reason(client, url, status, words):
    r = client.get(url)
    assert r.status_code == status, r.text
    assert words in r.text


def test_everything_is_read_only(client, seeded):
    assert client.post("/api/overview").status_code == 405
    src = client.app.state.sources.get(".")
    with pytest.raises(OperationalError, match="readonly"):
        src.store.create_campaign("written-by-the-dashboard")


def test_security_token_host_check_and_headers(seeded, capsys):
    with pytest.raises(ConfigError, match="without a token"):
        build_config(workspace=seeded.root, host="0.0.0.0")
    assert a3r_main(["--workspace", str(seeded.root), "dashboard", "--host", "0.0.0.0"]) == 1
    assert "without a token" in capsys.readouterr().err
    app = create_app(build_config(workspace=seeded.root, host="0.0.0.0", token=TOKEN))
    with TestClient(app, base_url="http://dash.example") as c:
        assert c.get("/api/overview").status_code == 401
        assert (
            c.get("/api/overview", headers={"Authorization": "Bearer wrong-token-wrong"}).status_code == 401
        )
        assert c.get("/api/overview", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        r = c.get(f"/campaign?ws=.&id=2&token={TOKEN}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/campaign?ws=.&id=2", "token leaves the URL"
        assert "httponly" in r.headers["set-cookie"].lower()
        assert c.get("/api/overview").status_code == 200, "the cookie carries the token from then on"
    local = create_app(build_config(workspace=seeded.root))
    with TestClient(local, base_url="http://evil.example") as c:
        assert c.get("/api/overview").status_code == 400, "DNS rebinding: a foreign Host is refused"
    with TestClient(local, base_url="http://localhost") as c:
        r = c.get("/")
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"


def test_report_dir_cannot_leave_the_reports_folder(seeded):
    assert report_dir(seeded.reports, "finished-study") == (seeded.reports / "finished-study").resolve()
    assert report_dir(seeded.reports, "../reports/finished-study") is None
    assert report_dir(seeded.reports, "live-study") is None


def test_parse_since():
    assert parse_since("3:10,4,5:-1") == {3: 10, 4: None, 5: -1}
    with pytest.raises(ValueError, match="empty"):
        parse_since(",")


def test_bench_matrix_flags_changes_beyond_the_repeats_noise(client):
    data = _ok(client, "/api/bench")
    assert data["commits"] == ["aaaaaaa1", "bbbbbbb2", "ccccccc3"]
    verdicts = {r["benchmark"]: r["verdict"] for r in data["regressions"]}
    assert verdicts == {"engine/step_time": "regression", "engine/episodes_per_s": "improvement"}
    assert bench_matrix([]) == {"commits": [], "benchmarks": [], "cells": [], "regressions": []}


def test_an_unreachable_swarm_server_is_a_502_with_the_reason(seeded):
    from tests_support import free_port

    cfg = build_config(workspace=seeded.empty, swarm=[{"url": f"http://127.0.0.1:{free_port()}"}])
    with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
        r = c.get("/api/swarm/0/episodes")
        assert r.status_code == 502 and "cannot reach swarm server" in r.json()["error"]["message"]
        assert c.get("/swarm?s=0").status_code == 200 and c.get("/swarm?s=1").status_code == 404


def test_an_empty_workspace_shows_no_campaign(seeded):
    with TestClient(create_app(build_config(workspace=seeded.empty)), base_url="http://127.0.0.1") as c:
        data = _ok(c, "/api/overview")
    assert data["campaigns"] == [] and data["sources"] == []


def test_the_commands_serve_and_refuse_unsafe_binds(seeded, capsys):
    """`a3r dashboard` as a real process answers over HTTP; `swarm dashboard` refuses an open bind."""
    import os
    import subprocess
    import sys
    import time

    import httpx
    from tests_support import free_port

    from engine.cli import main as swarm_main

    assert swarm_main(["dashboard", "--host", "0.0.0.0"]) == 2
    assert "without a token" in capsys.readouterr().err
    port = free_port()
    cmd = [sys.executable, "-m", "a3r", "--workspace", str(seeded.root), "dashboard", "--port", str(port)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ}, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/overview", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, (
                    proc.stdout.read() if proc.poll() else "timeout"
                )
                time.sleep(0.2)
        assert r.status_code == 200 and len(r.json()["campaigns"]) == 5
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"open http://127.0.0.1:{port}/" in out


def test_series_cache_extends_with_new_points_and_restarts_after_a_retry(tmp_path):
    from a3r.dashboard.sources import SeriesCache
    from a3r.store import Store

    from .conftest import bp

    store = Store(tmp_path / "a3r.db")
    stage = store.create_stage(store.create_campaign("c").id, "s")
    (run,) = store.add_blueprint(stage.id, bp("x", seeds=(1,)))
    cache = SeriesCache()
    assert cache.get(store, "reward", {run.id: 0}) == {run.id: []}
    a1 = store.dispatch(run.id, host="h", slot="0", run_dir=str(tmp_path), config_json="{}")
    store.ingest_metrics(a1.id, [(0, "reward", 0.1), (1, "reward", 0.2)], expected_offset=0, new_offset=2)
    assert cache.get(store, "reward", {run.id: 1}) == {run.id: [(0, 0.1), (1, 0.2)]}
    store.ingest_metrics(a1.id, [(2, "reward", 0.3)], expected_offset=2, new_offset=3)
    assert cache.get(store, "reward", {run.id: 1})[run.id] == [(0, 0.1), (1, 0.2), (2, 0.3)]
    store.finish_attempt(a1.id, "stale", failure_kind="infrastructure")
    store.settle_run(run.id, a1.id, "pending")
    a2 = store.dispatch(run.id, host="h", slot="0", run_dir=str(tmp_path), config_json="{}")
    store.ingest_metrics(a2.id, [(1, "reward", 0.25)], expected_offset=0, new_offset=1)
    assert cache.get(store, "reward", {run.id: 2})[run.id] == [(0, 0.1), (1, 0.25), (2, 0.3)], (
        "a new attempt re-reads the run: its step 1 replaces attempt 1's"
    )
    store.close()


def test_read_only_store_opens_the_right_file_whatever_its_path(tmp_path):
    """SQLite URIs treat "#" specially: the read-only store must still open this very file."""
    from a3r.store import Store

    path = tmp_path / "my runs #2" / "a3r.db"
    writer = Store(path)
    writer.create_campaign("here")
    reader = Store(path, read_only=True)
    try:
        assert [c.name for c in reader.campaigns()] == ["here"]
        with pytest.raises(OperationalError, match="readonly"):
            reader.create_campaign("not here")
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize("body", ['{"arms": null}', "[1]", '{"arms": {"a": 1}}', "not json"])
def test_a_malformed_report_json_gives_no_arms_and_no_error(tmp_path, body):
    from a3r.dashboard.app import report_summary

    (tmp_path / "report.json").write_text(body)
    assert report_summary(tmp_path) == {"answer": None, "conclusive": None, "arms": []}
