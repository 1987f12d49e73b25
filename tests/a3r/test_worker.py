"""The worker as a real process (no tmux, no monitor): it runs the job, heartbeats, streams metrics into
the store, records a classified result, obeys fencing and signals, and never leaves its job behind."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a3r.blueprints import render_files, write_files
from a3r.store import Store
from a3r.worker.spec import AttemptSpec

from .conftest import job, make_bp, pgid_alive, wait_for


@pytest.fixture
def setup(tmp_path):
    store = Store(tmp_path / "a3r.db")
    camp = store.create_campaign("c")
    stage = store.create_stage(camp.id, "s")

    def prepare(launch: str, *, wall: float = 30.0, with_db: bool = True):
        bp = make_bp(launch, wall=wall, task=f"t{len(store.runs())}")
        (run,) = store.add_blueprint(stage.id, bp)
        run_dir = str(tmp_path / "runs" / str(run.id))
        att = store.dispatch(run.id, host="local", slot="0", run_dir=run_dir, config_json="{}")
        write_files(run_dir, render_files(bp, run_id=run.id, seed=run.seed, run_dir=run_dir))
        spec = AttemptSpec(
            run_id=run.id,
            attempt_id=att.id,
            attempt_number=1,
            run_dir=run_dir,
            attempt_dir=att.attempt_dir,
            seed=run.seed,
            budget_steps=5,
            wall_time_s=wall,
            heartbeat_s=0.2,
            kill_grace_s=1.0,
            db_path=str(store.path) if with_db else None,
        )
        Path(att.attempt_dir).mkdir(parents=True)
        (Path(att.attempt_dir) / "attempt.json").write_text(spec.to_json())
        return run, att

    def start(run, att):
        cmd = [sys.executable, "-m", "a3r", "worker", "run", str(run.id), "--attempt-dir", att.attempt_dir]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    yield store, prepare, start
    store.close()


def test_success_streams_metrics_and_records(setup):
    store, prepare, start = setup
    run, att = prepare(job("--steps", "5", "--sleep", "0.1"))
    w = start(run, att)
    out, _ = w.communicate(timeout=30)
    assert w.returncode == 0, out
    a = store.get_attempt(att.id)
    assert (a.state, a.exit_code, a.failure_kind) == ("succeeded", 0, None)
    assert a.heartbeat_seq >= 2 and a.worker_pid == w.pid and a.job_pgid
    assert store.get_run(run.id).state == "running", "the worker records facts; the scheduler settles the run"
    assert store.metric_series(run.id, "reward") == [(i, i / 5) for i in range(5)]
    result = json.loads((Path(att.attempt_dir) / "result.json").read_text())
    assert result["state"] == "succeeded" and "done" in result["log_tail"]
    assert "fake job run=" in (Path(att.attempt_dir) / "log.txt").read_text()
    assert "[a3r] attempt 1 succeeded" in out


def test_code_error_classified_with_log_tail(setup):
    store, prepare, start = setup
    run, att = prepare(job("--fail", "code", "--fail-at", "1"))
    assert start(run, att).wait(timeout=30) == 0
    a = store.get_attempt(att.id)
    assert (a.state, a.failure_kind, a.exit_code) == ("failed", "code_error", 1)
    assert "ValueError: reward function returned a string" in a.log_tail


def test_wall_time_budget_kills_job(setup):
    store, prepare, start = setup
    run, att = prepare(job("--steps", "100", "--sleep", "0.2"), wall=1.0)
    t0 = time.monotonic()
    assert start(run, att).wait(timeout=30) == 0
    a = store.get_attempt(att.id)
    assert (a.state, a.failure_kind) == ("timed_out", "timeout")
    assert time.monotonic() - t0 < 8
    assert not pgid_alive(a.job_pgid)


def test_fenced_worker_never_starts_a_cancelled_attempt(setup):
    store, prepare, start = setup
    run, att = prepare(job())
    store.cancel_runs([run.id])
    w = start(run, att)
    assert w.wait(timeout=30) == 3
    assert not (Path(att.attempt_dir) / "log.txt").exists(), "the job never ran"


def test_cancel_while_running_stops_job_at_next_heartbeat(setup):
    store, prepare, start = setup
    run, att = prepare(job("--steps", "200", "--sleep", "0.1"))
    w = start(run, att)
    wait_for(lambda: store.get_attempt(att.id).job_pgid)
    pgid = store.get_attempt(att.id).job_pgid
    store.cancel_runs([run.id])
    assert w.wait(timeout=10) == 3
    assert not pgid_alive(pgid)
    assert store.get_attempt(att.id).state == "cancelled"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_records_infrastructure_failure(setup, sig):
    store, prepare, start = setup
    run, att = prepare(job("--steps", "200", "--sleep", "0.1"))
    w = start(run, att)
    wait_for(lambda: store.get_attempt(att.id).job_pgid)
    pgid = store.get_attempt(att.id).job_pgid
    w.send_signal(sig)
    assert w.wait(timeout=10) == 0
    a = store.get_attempt(att.id)
    assert (a.state, a.failure_kind) == ("failed", "infrastructure") and sig.name in a.reason
    assert not pgid_alive(pgid)


def test_sigkilled_worker_takes_its_job_down(setup):
    store, prepare, start = setup
    run, att = prepare(job("--steps", "200", "--sleep", "0.1"))
    w = start(run, att)
    wait_for(lambda: store.get_attempt(att.id).job_pgid)
    pgid = store.get_attempt(att.id).job_pgid
    w.kill()
    w.wait()
    wait_for(lambda: not pgid_alive(pgid), timeout=30)
    assert store.get_attempt(att.id).state == "running", "nobody recorded it: the monitor will find it stale"


def test_files_only_worker_writes_heartbeat_and_result(setup):
    store, prepare, start = setup
    run, att = prepare(job("--steps", "3", "--sleep", "0.1"), with_db=False)
    assert start(run, att).wait(timeout=30) == 0
    d = Path(att.attempt_dir)
    hb = json.loads((d / "heartbeat.json").read_text())
    assert hb["attempt_id"] == att.id and hb["state"] == "exited" and hb["seq"] >= 1
    assert json.loads((d / "result.json").read_text())["state"] == "succeeded"
    assert store.get_attempt(att.id).state == "dispatched", "no store access: the monitor ingests the files"


def test_attempt_spec_roundtrip_and_validation(tmp_path):
    spec = AttemptSpec(
        run_id=1,
        attempt_id=2,
        attempt_number=1,
        run_dir="/r",
        attempt_dir=str(tmp_path),
        seed=3,
        budget_steps=10,
        wall_time_s=5.0,
        heartbeat_s=1.0,
        env={"CUDA_VISIBLE_DEVICES": "0"},
    )
    (tmp_path / "attempt.json").write_text(spec.to_json())
    assert AttemptSpec.read(tmp_path) == spec
    env = spec.job_env({"PATH": "/bin"})
    assert env["A3R_CHECKPOINT_DIR"] == "/r/checkpoints" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["A3R_METRICS_FILE"] == f"{tmp_path}/metrics.jsonl" and env["A3R_ATTEMPT"] == "1"
    with pytest.raises(ValueError, match="unknown fields"):
        AttemptSpec.from_json(json.dumps({**json.loads(spec.to_json()), "surprise": 1}))
    with pytest.raises(ValueError, match="run_id"):
        AttemptSpec.from_json(json.dumps({**json.loads(spec.to_json()), "run_id": "1"}))


def test_a_job_whose_training_history_fails_the_audit_fails_its_attempt(setup, tmp_path):
    """A job that exits 0 but whose run dir logged a final evaluation twice, the first cut short (issue 26
    defect 4's trace), is not a success: the attempt fails with the audit's reason and audit.json."""
    store, prepare, start = setup
    writer = tmp_path / "history.py"
    writer.write_text(
        "import json, os, pathlib, sys\n"
        "d = pathlib.Path(os.environ['A3R_CHECKPOINT_DIR']); d.mkdir(parents=True, exist_ok=True)\n"
        "(d / 'swarm_config.yaml').write_text('pool: {group_size: 2}\\n')\n"
        "evals = [(0.1, 27), (0.3, 64)] if sys.argv[1:] == ['cut'] else [(0.3, 64)]\n"
        "rows = [{'step': 1.0, 'pg_loss': 0.1}] + [{'step': 1, 'eval_accuracy': a, 'eval_items': n} for a, n in evals]\n"
        "(d / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\\n' for r in rows))\n"
    )
    run, att = prepare(f"{sys.executable} {writer} cut")
    assert start(run, att).wait(timeout=30) == 0
    a = store.get_attempt(att.id)
    assert (a.state, a.failure_kind, a.exit_code) == ("failed", "code_error", 0)
    audit = json.loads((Path(att.attempt_dir) / "audit.json").read_text())
    assert audit["ok"] is False and any("2 eval_accuracy rows for step 1" in v for v in audit["violations"])
    run, att = prepare(f"{sys.executable} {writer}")  # the same job with one complete evaluation
    assert start(run, att).wait(timeout=30) == 0
    assert store.get_attempt(att.id).state == "succeeded"
    assert json.loads((Path(att.attempt_dir) / "audit.json").read_text())["ok"] is True
