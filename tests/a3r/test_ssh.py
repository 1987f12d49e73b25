"""ssh hosts against a real sshd on loopback: tmux, the worker and the probe run "remotely" through ssh;
the worker has no store access there, so the monitor ingests its heartbeats, metrics and results."""

import subprocess

import pytest

from a3r.config import HostSpec

from .conftest import history, job, make_bp, pgid_alive, wait_for
from .sshd import INSTALL, SshServer, ensure_sshd

pytestmark = [pytest.mark.tmux, pytest.mark.sshd]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    path = ensure_sshd()
    if path is None:
        pytest.skip(f"sshd unavailable and not installable here; install it with: {INSTALL}")
    server = SshServer(path, tmp_path_factory.mktemp("sshd"))
    server.start()
    yield server
    server.stop()


def _stage(ws):
    return ws.create_stage(ws.create_campaign("c").id, "s0")


def _remote_sessions(ws, host):
    out = subprocess.run(
        ["tmux", "-L", ws.hosts[host].socket, "ls", "-F", "#{session_name}"], capture_output=True, text=True
    )
    return out.stdout.split()


def test_runs_on_ssh_host_with_gpu_slots(make_ws, sshd, tmp_path):
    gpu = sshd.host_spec(
        "gpu", tmp_path / "remote", slots=[{"name": "gpu0", "gpus": "0"}, {"name": "gpu1", "gpus": "1"}]
    )
    ws = make_ws(hosts=[gpu])
    runs = ws.add_blueprints(
        _stage(ws).id, [make_bp(job("--steps", "6", "--sleep", "0.1"), seeds=(1, 2), steps=6)]
    )
    ids = [r.id for r in runs]
    assert ws.wait(ids, timeout=60, drive=True) == {i: "succeeded" for i in ids}
    slots = set()
    for rid in ids:
        (a,) = ws.attempts(rid)
        assert a.host == "gpu" and a.attempt_dir.startswith(str(tmp_path / "remote"))
        assert a.heartbeat_seq >= 1 and a.started_at is not None, "heartbeats ingested over ssh"
        assert ws.metric_series(rid, "reward") == [(i, i / 6) for i in range(6)], "metrics ingested over ssh"
        slots.add(a.slot)
        log = ws.logs(rid)
        assert f"cuda={dict(gpu0='0', gpu1='1')[a.slot]}" in log and "done" in log
    assert slots == {"gpu0", "gpu1"}
    remote_run_dir = tmp_path / "remote" / ws.key / "runs" / str(ids[0])
    assert {"blueprint.md", "config.yaml", "run.sh"} <= {p.name for p in remote_run_dir.iterdir()}
    (status,) = ws.host_status()
    assert status.reachable and status.slots == {"gpu0": None, "gpu1": None}
    assert ws.attach_argv(ids[0])[0] == "ssh"


def test_unreachable_host_runs_move_and_orphans_are_fenced(make_ws, sshd, tmp_path):
    gpu = sshd.host_spec("gpu", tmp_path / "remote")
    ws = make_ws(hosts=[gpu, HostSpec(name="local", slots=1)])
    # attempt 1 (remote) is slow, so it is still running when the host comes back and must be fenced
    launch = job("--steps", "30", "--sleep", "0.05", "--first-attempt-sleep", "1")
    (run,) = ws.add_blueprints(_stage(ws).id, [make_bp(launch, steps=30)])
    wait_for(lambda: ws.attempts(run.id) and ws.attempts(run.id)[0].heartbeat_seq >= 2, drive=ws, timeout=30)
    first = ws.attempts(run.id)[0]
    assert first.host == "gpu" and first.job_pgid
    sshd.stop()
    try:
        wait_for(lambda: ws.store.get_attempt(first.id).state == "stale", drive=ws, timeout=20)
        lost = ws.store.get_attempt(first.id)
        assert "unreachable" in lost.reason and lost.failure_kind == "infrastructure"
        assert lost.ended_at - lost.heartbeat_at <= ws.config.scheduler.stale_after + 3.5, (
            "the silence limit + ssh timeout"
        )
        assert not {h.name: h.reachable for h in ws.store.hosts()}["gpu"]
        assert first.session in _remote_sessions(ws, "gpu"), "the orphan still runs while the host is away"
        assert ws.wait([run.id], timeout=60, drive=True)[run.id] == "succeeded", history(ws, run.id)
    finally:
        sshd.start()
    assert len(ws.attempts(run.id)) == 2, history(ws, run.id)
    lost, retry = ws.attempts(run.id)
    assert (retry.host, retry.state, retry.retry_of) == ("local", "succeeded", lost.id)
    # the host is back: the monitor fences the orphan (kills its session and job) and ingests nothing from it
    wait_for(lambda: first.session not in _remote_sessions(ws, "gpu"), drive=ws, timeout=20)
    wait_for(lambda: not pgid_alive(first.job_pgid), timeout=30)
    assert ws.store.get_attempt(first.id).state == "stale"
    assert ws.store.events(run_id=run.id, kinds=["reaped"])
    assert [s for s, _ in ws.metric_series(run.id, "reward")] == list(range(30))
    assert {h.name: h.reachable for h in ws.store.hosts()}["gpu"]
