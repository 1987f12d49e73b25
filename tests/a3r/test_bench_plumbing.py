"""`a3r bench` plumbing without training: git revisions and worktrees, environment keys, the results
table (migration, idempotency, JSONL), the schedule's state and timing, bisect, the report on an empty
store, and the CLI's error paths. Real git repositories and real SQLite files in tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from a3r.api import Workspace
from a3r.bench.check import bisect_first_bad
from a3r.bench.checkout import EnvMode, checkout, env_key, prepare_env, resolve_commits
from a3r.bench.report import write_report
from a3r.bench.schedule import cron_line, next_due, parse_every, schedule_command
from a3r.bench.store import (
    Measurement,
    export_jsonl,
    get_schedule,
    measured_commits,
    measurements,
    record_run,
    save_schedule,
)
from a3r.bench.suite import SUITES_DIR, load_suite
from a3r.blueprints import Blueprint, Budget
from a3r.exceptions import BenchError
from a3r.store import Store, migrate, schema_version
from a3r.store.db import make_engine
from a3r.store.models import BenchSchedule

GIT = ["git", "-c", "user.email=b@t", "-c", "user.name=b"]


def _commit(repo: Path, msg: str, **files: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", msg], check=True)
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> tuple[Path, list[str]]:
    r = tmp_path / "repo"
    r.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(r)], check=True)
    shas = [
        _commit(r, "one", **{"pyproject.toml": "[project]\nname='x'\n", "a.py": "1"}),
        _commit(r, "two", **{"a.py": "2"}),
        _commit(r, "three", **{"pyproject.toml": "[project]\nname='x'\ndependencies=['y']\n"}),
    ]
    return r, shas


def test_revisions_ranges_and_option_injection(repo):
    r, shas = repo
    assert [c.sha for c in resolve_commits(r, commits=f"{shas[0]}..HEAD")] == shas  # A included
    assert [c.subject for c in resolve_commits(r, commit="HEAD~1")] == ["two"]
    assert resolve_commits(r)[0].sha == shas[2]
    for bad, msg in [("--output=/tmp/x", "invalid revision"), ("nope", "not a commit")]:
        with pytest.raises(BenchError, match=msg):
            resolve_commits(r, commit=bad)
    with pytest.raises(BenchError, match="A..B"):
        resolve_commits(r, commits="HEAD")
    with pytest.raises(BenchError, match="not both"):
        resolve_commits(r, commit="HEAD", commits="HEAD~1..HEAD")


def test_worktrees_and_environment_keys(repo, tmp_path):
    r, shas = repo
    tree = checkout(r, shas[1], tmp_path / "co")
    assert (tree / "a.py").read_text() == "2"
    assert checkout(r, shas[1], tmp_path / "co") == tree  # reused
    # commits one and two share their dependency files, three changed pyproject.toml
    assert env_key(r, shas[0]) == env_key(r, shas[1]) != env_key(r, shas[2])
    env = prepare_env(EnvMode.CURRENT, r, shas[1], tree, tmp_path / "envs")
    assert env.python == sys.executable and env.versions["python"].count(".") == 2


def _row(run_id: int, metric: str, commit: str = "c" * 40, value: float = 1.0) -> Measurement:
    return Measurement(
        suite="s",
        benchmark="b",
        metric=metric,
        value=value,
        unit="s",
        direction="lower",
        commit=commit,
        commit_time=1.0,
        subject="x",
        round=0,
        seed=0,
        host="local",
        versions={"python": "3"},
        run_id=run_id,
        attempt_id=run_id,
        ts=0.0,
        data={},
    )


def _dispatched(ws, tmp_path, seeds) -> list[tuple[int, int]]:
    """(run id, attempt id) of one dispatched attempt per seed: rows for measurements to point at."""
    st = ws.create_stage(ws.create_campaign("c").id, "s")
    bp = Blueprint(
        purpose="p",
        hypothesis="h",
        task="t",
        seeds=list(seeds),
        budget=Budget(steps=1, wall_time_s=9),
        metrics=["m"],
        success_criteria="c",
        launch_command="true",
    )
    out = []
    for i, r in enumerate(ws.add_blueprints(st.id, [bp])):
        a = ws.store.dispatch(r.id, host="local", slot=str(i), run_dir=str(tmp_path), config_json="{}")
        out.append((r.id, a.id))
    return out


def test_results_are_recorded_once_and_mirrored_to_jsonl(tmp_path):
    ws = Workspace(tmp_path / "ws")
    (run_a, att_a), (run_b, _) = _dispatched(ws, tmp_path, [0, 1])
    jsonl = tmp_path / "r.jsonl"
    rows = [Measurement(**{**vars(_row(run_a, m)), "attempt_id": att_a}) for m in ("x", "y")]
    assert record_run(ws.store, rows, jsonl) == 2
    assert record_run(ws.store, rows, jsonl) == 0
    assert len(jsonl.read_text().splitlines()) == 2
    assert [m.metric for m in measurements(ws.store, suite="s")] == ["x", "y"]
    assert measured_commits(ws.store, "s") == ["c" * 40]
    with pytest.raises(ValueError, match="one run"):
        record_run(ws.store, [rows[0], Measurement(**{**vars(rows[0]), "run_id": run_b})])
    # the dashboard's benchmark x commit view reads them, with each metric's own direction
    from a3r.dashboard.bench import bench_view

    record_run(
        ws.store,
        [
            Measurement(**{**vars(r), "commit": "d" * 40, "value": 3.0, "commit_time": 2.0, "run_id": run_b})
            for r in rows
        ],
    )
    viewer = Store(ws.db_path, read_only=True)
    view = bench_view([viewer])
    viewer.close()
    assert view["benchmarks"] == ["s/b/x", "s/b/y"] and view["commits"] == ["cccccccccc", "dddddddddd"]
    assert {r["benchmark"]: (r["lower_is_better"], r["verdict"]) for r in view["regressions"]} == {
        "s/b/x": (True, "no repeats"),
        "s/b/y": (True, "no repeats"),
    }
    out = tmp_path / "export.jsonl"
    assert export_jsonl(ws.store, out) == 4 and json.loads(out.read_text().splitlines()[0])["metric"] == "x"
    ws.close()


def test_version_1_store_gains_the_bench_tables(tmp_path):
    from a3r.dashboard.bench import bench_view

    path = tmp_path / "old.db"
    eng = make_engine(path)
    migrate(eng, target=1, migrations={})
    with eng.begin() as conn:
        conn.exec_driver_sql("DROP TABLE bench_measurement")
        conn.exec_driver_sql("DROP TABLE bench_schedule")
    eng.dispose()
    viewer = Store(path, read_only=True)  # the dashboard still reads a file no writer has upgraded
    assert viewer.version == 1 and bench_view([viewer])["benchmarks"] == []
    viewer.close()
    st = Store(path)
    assert schema_version(st.engine) == 2
    save_schedule(st, BenchSchedule(name="s@main", repo="/r", branch="main", suite_path="d", every_s=60))
    assert get_schedule(st, "s@main").every_s == 60
    st.close()


def test_schedule_timing_and_cron():
    assert parse_every("24h") == 86400 and parse_every("30m") == 1800 and parse_every("3600") == 3600
    for bad in ("soon", "5s", ""):
        with pytest.raises(ValueError, match="--every"):
            parse_every(bad)
    row = BenchSchedule(name="n", repo="r", branch="b", suite_path="s", every_s=100)
    assert next_due(None, 5.0) == 5.0 and next_due(row, 5.0) == 5.0
    row.last_run_at = 50.0
    assert next_due(row, 60.0) == 150.0
    assert cron_line(86400, "cmd") == "0 3 * * * cmd"
    assert cron_line(6 * 3600, "cmd") == "0 */6 * * * cmd"
    assert cron_line(1800, "cmd") == "*/30 * * * * cmd"
    cmd = schedule_command(Path("/w s"), Path("/r"), "main; rm -rf /", None)
    assert "'main; rm -rf /'" in cmd and "'/w s'" in cmd and "--suite" not in cmd


def test_bisect_finds_the_first_bad_commit():
    commits = [f"c{i}" for i in range(10)]
    asked = []

    def is_bad(c):
        asked.append(c)
        return int(c[1:]) >= 6

    first, seen = bisect_first_bad(commits, is_bad)
    assert first == "c6" and len(asked) <= 4 and all(bad == (int(c[1:]) >= 6) for c, bad in seen)
    assert bisect_first_bad(["g", "b"], is_bad)[0] == "b"
    with pytest.raises(ValueError):
        bisect_first_bad(["g"], is_bad)


def test_report_on_an_empty_store(tmp_path):
    st = Store(tmp_path / "e.db")
    paths = write_report(st, load_suite(SUITES_DIR / "tiny.yaml"), tmp_path / "rep")
    assert "No measurements yet." in Path(paths["markdown"]).read_text()
    assert Path(paths["html"]).exists() and paths["figures"] == []
    st.close()


def test_cli_errors_name_the_fix(repo, tmp_path, monkeypatch, capsys):
    """The real `a3r` entry point, in-process (the e2e tests run it as a subprocess)."""
    from a3r.cli import main

    r, _ = repo
    monkeypatch.chdir(r)
    ws = ["--workspace", str(tmp_path / "ws")]
    tiny = str(SUITES_DIR / "tiny.yaml")

    def a3r(*args: str) -> tuple[int, str]:
        code = main(list(args))
        return code, capsys.readouterr().err

    code, err = a3r(*ws, "bench", "check", "--suite", tiny)
    assert code == 2 and "no measured commit to compare" in err and "--baseline" in err
    code, err = a3r(*ws, "bench", "run", "--commit=--upload-pack=x")
    assert code == 2 and "invalid revision" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbenchmarks: []\n")
    code, err = a3r(*ws, "bench", "run", "--suite", str(bad))
    assert code == 2 and "benchmarks" in err
    code, err = a3r(*ws, "bench", "check", "--baseline", "HEAD", "--suite", tiny)
    assert code == 2 and "same commit" in err
    code, err = a3r("bench", "schedule", "--every", "2s")
    assert code == 2 and "at least a minute" in err
    code, err = a3r(*ws, "bench", "compare", "HEAD~1", "HEAD", "--suite", tiny)
    assert code == 2 and "a3r bench run --commit" in err


def test_schedule_state_survives_a_restart(repo, tmp_path):
    """A restarted schedule reads its last round from the store: not due -> it only sleeps; due -> a round
    (here a skip: the newest commit is measured) is recorded before the next sleep."""
    import time

    from a3r.bench.runner import BenchRunner
    from a3r.bench.schedule import run_schedule

    r, shas = repo
    ws = Workspace(tmp_path / "ws")
    runner = BenchRunner(ws, load_suite(SUITES_DIR / "tiny.yaml"), r, say=lambda _m: None)
    name = "tiny@main"

    def last_round(ago: float, commit: str = "") -> None:  # what a process that died left in the store
        row = BenchSchedule(name=name, repo=str(r), branch="main", suite_path="t", every_s=3600)
        row.last_run_at, row.last_commit = time.time() - ago, commit
        save_schedule(ws.store, row)

    last_round(60, shas[1])
    naps = []

    class Stop(Exception):
        pass

    def sleep(s):
        naps.append(s)
        raise Stop

    with pytest.raises(Stop):
        run_schedule(runner, branch="main", every_s=3600, suite_path="t", sleep=sleep)
    assert naps and 1 <= naps[0] <= 300, "not due for another 59 minutes: it only sleeps"
    assert get_schedule(ws.store, name).last_commit == shas[1]

    # due now, and the newest commit already has a measurement: the round is a skip, recorded
    ((run_id, att_id),) = _dispatched(ws, tmp_path, [0])
    m = _row(run_id, "x", commit=shas[2])
    record_run(ws.store, [Measurement(**{**vars(m), "suite": "tiny", "attempt_id": att_id})])
    last_round(7200)
    with pytest.raises(Stop):
        run_schedule(runner, branch="main", every_s=3600, suite_path="t", sleep=sleep)
    row = get_schedule(ws.store, name)
    assert row.last_status == "skipped" and row.last_commit == shas[2] and time.time() - row.last_run_at < 60
    ws.close()
