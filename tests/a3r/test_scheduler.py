"""Scheduler end to end on the local host: real tmux sessions, real workers, real jobs, real SQLite.

The test process drives the scheduler with `Workspace.wait(drive=True)` (one tick per poll), exactly as a
monitor would."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from a3r.config import HostSpec
from a3r.exceptions import LeaseHeld

from .conftest import history, job, make_bp, pgid_alive, wait_for

pytestmark = pytest.mark.tmux


def _stage(ws):
    camp = ws.create_campaign("c")
    return ws.create_stage(camp.id, "s0")


def test_fifo_with_priorities_one_run_per_slot(make_ws):
    ws = _stage_ws = make_ws(slots=2)
    st = _stage(_stage_ws)
    low = ws.add_blueprints(
        st.id, [make_bp(job("--steps", "3", "--sleep", "0.05"), seeds=(1, 2, 3, 4), task="low")]
    )
    high = ws.add_blueprints(
        st.id, [make_bp(job("--steps", "3", "--sleep", "0.05"), seeds=(9,), task="high")], priority=10
    )
    ids = [r.id for r in low + high]
    max_busy = 0

    def tick_and_count():
        nonlocal max_busy
        ws.poll()
        max_busy = max(max_busy, len(ws.store.active_attempts()))
        return ws.poll_runs(ids).done

    wait_for(tick_and_count, timeout=60)
    assert max_busy <= 2, "one run per slot"
    assert all(s == "succeeded" for s in ws.poll_runs(ids).states.values())
    order = sorted(ids, key=lambda rid: ws.attempts(rid)[0].dispatched_at)
    assert order[0] == high[0].id, "higher priority first"
    assert order[1:] == [r.id for r in low], "then FIFO"
    for rid in ids:
        (a,) = ws.attempts(rid)
        assert a.state == "succeeded" and a.heartbeat_at is not None
        assert ws.metric_series(rid, "reward") == [(0, 0.0), (1, 1 / 3), (2, 2 / 3)]
    assert {r.seed: ws.final_metrics(r.id)["seed"] for r in low} == {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}, (
        "A3R_SEED reached each run"
    )


def test_failure_policies(make_ws):
    """One workspace, one run per policy, all running at once."""
    ws = make_ws(slots=4, max_infra_retries=2, max_fix_retries=2)
    st = _stage(ws)
    mk = lambda task, launch, **kw: ws.add_blueprints(st.id, [make_bp(launch, task=task, **kw)])[0]  # noqa: E731
    code = mk("code", job("--fail", "code", "--fail-at", "1"))
    oom_fixed = mk("oom_fixed", job("--oom-above", "4"))  # 8 -> 4 fits
    oom_capped = mk("oom_capped", job("--oom-above", "1"))  # never fits: 8 -> 4 -> 2, then give up
    nan = mk("nan", job("--fail", "nan", "--fail-at", "1", "--fail-attempts", "1"))
    infra = mk("infra", job("--fail", "infra", "--fail-at", "0"))
    slow = mk("timeout", job("--steps", "100", "--sleep", "0.2"), wall=1.5)
    ids = [r.id for r in (code, oom_fixed, oom_capped, nan, infra, slow)]
    states = ws.wait(ids, timeout=90, drive=True)

    assert states[code.id] == "failed"
    (a,) = ws.attempts(code.id)
    assert a.failure_kind == "code_error" and "ValueError" in a.log_tail, (
        "code errors are handed to the caller"
    )
    assert ws.run(code.id).failure_kind == "code_error"

    assert states[oom_fixed.id] == "succeeded"
    a1, a2 = ws.attempts(oom_fixed.id)
    assert (a1.failure_kind, a2.state, a2.retry_of) == ("oom", "succeeded", a1.id)
    assert json.loads(a2.config_json)["training"]["micro_batch_size"] == 4 and "halve_micro_batch" in a2.fix
    assert "micro_batch_size: 4" in (ws.root / "runs" / str(oom_fixed.id) / "config.yaml").read_text()

    assert states[oom_capped.id] == "failed"
    mbs = [json.loads(a.config_json)["training"]["micro_batch_size"] for a in ws.attempts(oom_capped.id)]
    assert mbs == [8, 4, 2] and ws.run(oom_capped.id).failure_kind == "oom"

    assert states[nan.id] == "succeeded"
    n1, n2 = ws.attempts(nan.id)
    assert n1.failure_kind == "nan_divergence" and json.loads(n2.config_json)["training"]["lr"] == 5e-5

    assert states[infra.id] == "failed"
    atts = ws.attempts(infra.id)
    assert [a.failure_kind for a in atts] == ["infrastructure"] * 3, "1 try + max_infra_retries=2"
    gaps = [b.dispatched_at - a.ended_at for a, b in zip(atts, atts[1:], strict=False)]
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4, f"exponential backoff, got {gaps}"
    assert [a.retry_of for a in atts] == [None, atts[0].id, atts[1].id]

    assert states[slow.id] == "timed_out"
    (t,) = ws.attempts(slow.id)
    assert t.failure_kind == "timeout" and not pgid_alive(t.job_pgid)

    finals = {f.run_id for f in ws.failures(final_only=True)}
    assert finals == {code.id, oom_capped.id, infra.id, slow.id}


def test_cancel_running_and_pending(make_ws):
    ws = make_ws(slots=1)
    st = _stage(ws)
    runs = ws.add_blueprints(st.id, [make_bp(job("--steps", "500", "--sleep", "0.05"), seeds=(1, 2))])
    wait_for(
        lambda: ws.store.get_run(runs[0].id).state == "running" and ws.attempts(runs[0].id)[0].job_pgid,
        drive=ws,
    )
    a = ws.attempts(runs[0].id)[0]
    assert ws.cancel([r.id for r in runs]) == [a.id]
    wait_for(lambda: not pgid_alive(a.job_pgid), timeout=10)
    ws.poll()
    assert [ws.run(r.id).state for r in runs] == ["cancelled", "cancelled"]
    assert ws.attempts(runs[1].id) == [], "a cancelled pending run never starts"
    sessions = subprocess.run(
        ["tmux", "-L", ws.hosts["local"].socket, "ls"], capture_output=True, text=True
    ).stdout
    assert a.session not in sessions


def test_explicit_retry_after_code_fix(make_ws):
    ws = make_ws(slots=1)
    st = _stage(ws)
    (run,) = ws.add_blueprints(
        st.id, [make_bp(job("--oom-above", "0"), cfg={"training": {"micro_batch_size": 1}})]
    )
    assert ws.wait([run.id], timeout=30, drive=True)[run.id] == "failed", "no rule fix for micro_batch_size 1"
    assert ws.failures(final_only=True)[0].failure_kind == "oom"
    ws.retry(run.id, overrides={"training": {"micro_batch_size": 0}}, reason="leader: cpu offload")
    assert ws.wait([run.id], timeout=30, drive=True)[run.id] == "succeeded", history(ws, run.id)
    a1, a2 = ws.attempts(run.id)
    assert a2.retry_of == a1.id and "leader: cpu offload" in a2.fix


def test_one_scheduler_per_store(make_ws):
    ws = make_ws(slots=1)
    proc = ws.start_monitor()
    try:
        wait_for(lambda: ws.monitor_pid() == proc, timeout=20)
        with pytest.raises(LeaseHeld):
            ws.poll()
    finally:
        assert ws.stop_monitor(timeout=10)
    ws.poll()  # free again


def test_crash_between_dispatch_and_launch_is_recovered(make_ws):
    """A monitor killed after writing the attempt but before starting its session leaves a dispatched
    attempt with no session: the next tick declares it stale and retries the run."""
    ws = make_ws(slots=1)
    st = _stage(ws)
    (run,) = ws.add_blueprints(st.id, [make_bp(job("--steps", "2", "--sleep", "0.05"))])
    ghost = ws.store.dispatch(
        run.id, host="local", slot="0", run_dir=ws.hosts["local"].run_dir(run.id), config_json="{}"
    )
    assert ws.wait([run.id], timeout=30, drive=True)[run.id] == "succeeded", history(ws, run.id)
    a1, a2 = ws.attempts(run.id)
    assert (a1.id, a1.state, a1.failure_kind) == (
        ghost.id,
        "stale",
        "infrastructure",
    ) and "vanished" in a1.reason
    assert a2.state == "succeeded"


def test_hung_worker_is_fenced_after_the_heartbeat_silence_limit(make_ws, tmp_path):
    """A worker that stops heartbeating (pane alive, job running) is declared stale after `stale_after_s`,
    its job is killed before the retry starts, and the retry resumes from the checkpoint."""
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / "hooks" / "hang_worker.py"} "$@"\n'
    )
    wrapper.chmod(0o755)
    ws = make_ws(hosts=[HostSpec(name="local", slots=1, python=str(wrapper))])
    st = _stage(ws)
    (run,) = ws.add_blueprints(st.id, [make_bp(job("--steps", "30", "--sleep", "0.1"))])
    wait_for(lambda: ws.attempts(run.id) and ws.attempts(run.id)[0].heartbeat_seq >= 1, drive=ws)
    a = ws.attempts(run.id)[0]
    assert ws.wait([run.id], timeout=60, drive=True)[run.id] == "succeeded", history(ws, run.id)
    lost, retry = ws.attempts(run.id)
    limit = ws.config.scheduler.stale_after
    assert (lost.state, lost.failure_kind) == ("stale", "infrastructure") and "no heartbeat" in lost.reason
    # The rule, exactly: stale after the configured silence, never before (the default of 2 heartbeats is
    # test_config's). When the driver's tick notices it is timing, so the upper bound leaves a loaded
    # machine's headroom (a fresh-clone CI run saw a tick 0.56 s late).
    assert limit <= lost.ended_at - lost.heartbeat_at <= limit + 3.0, "stale after the limit (+ a late tick)"
    assert not pgid_alive(a.job_pgid), "fenced: the hung worker's job was killed"
    assert retry.dispatched_at >= lost.ended_at and retry.retry_of == lost.id
    assert "resuming at step 0" not in ws.logs(run.id), "the retry resumed from the checkpoint"


def test_a_slots_thread_count_reaches_its_runs(make_ws):
    """Two CPU slots of one thread each (A3R's way to run two runs side by side on two cores without
    oversubscribing them): the job in each slot sees OMP_NUM_THREADS=1."""
    ws = make_ws(
        hosts=[HostSpec(name="local", slots=[{"name": "0", "threads": 1}, {"name": "1", "threads": 1}])]
    )
    runs = ws.add_blueprints(_stage(ws).id, [make_bp(job("--steps", "2", "--sleep", "0.05"), seeds=(1, 2))])
    ids = [r.id for r in runs]
    assert ws.wait(ids, timeout=60, drive=True) == {i: "succeeded" for i in ids}
    assert {ws.attempts(i)[0].slot for i in ids} == {"0", "1"}
    for i in ids:
        assert "threads=1 " in ws.logs(i), ws.logs(i)
