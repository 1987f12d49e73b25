"""Episode groups over real servers: two-phase commit lands a workflow's episodes in every pool or none,
including when a server fails between the phases and is SIGKILLed and restarted from its journal."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from tests_support import ADMIN_TOKEN, free_port, serve_process

from engine.client import EpisodeGroup, SwarmClient, SwarmHTTPError
from engine.config import SwarmConfig
from engine.errors import GroupInDoubt

MSGS = [{"role": "user", "content": "hi"}]


def _call(ep) -> None:
    ep.openai(max_retries=0).chat.completions.create(model=ep.model, messages=MSGS, max_tokens=2)


def _pool_ids(c: SwarmClient) -> list[str]:
    return sorted(e["episode_id"] for e in c._http.get("/swarm/pool/episodes").json()["episodes"])


def test_group_commits_on_every_server_and_answers_repeats(live_server):
    a, b = live_server(), live_server()
    with a.client() as ca, b.client() as cb:
        with EpisodeGroup({"a": ca, "b": cb, "b2": cb}, task_id="duo") as g:  # two roles on b
            for role in ("a", "b", "b2"):
                _call(g[role])
            out = g.commit({"a": 1.0, "b": 0.0, "b2": 0.5})
        assert all(o.accepted for o in out.values())
        assert len(_pool_ids(ca)) == 1 and len(_pool_ids(cb)) == 2
        again = cb.commit_group(g.group_id)  # idempotent: same members, nothing pooled twice
        assert again["state"] == "committed" and len(again["members"]) == 2
        assert len(_pool_ids(cb)) == 2
        with pytest.raises(SwarmHTTPError) as e:
            cb.abort_group(g.group_id)
        assert e.value.status == 409 and "committed" in e.value.reason


def test_group_http_errors_are_clear(live_server):
    srv = live_server()
    with srv.client() as c:
        with pytest.raises(SwarmHTTPError) as e:
            c.commit_group("grp-" + "0" * 16)
        assert e.value.status == 404 and "no prepared episode" in e.value.reason
        with pytest.raises(SwarmHTTPError) as e:
            c.commit_group("bad id!")
        assert e.value.status == 422
        ev = c.begin_episode("t", is_eval=True)
        with pytest.raises(SwarmHTTPError) as e:
            ev.prepare("grp-" + "1" * 16, 1.0)
        assert e.value.status == 400 and "end them instead" in e.value.reason
        r = httpx.post(srv.url + f"/swarm/groups/grp-{'2' * 16}/commit", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401


def test_a_failed_prepare_aborts_the_group_everywhere(live_server):
    a, b = live_server(), live_server()
    with a.client() as ca, b.client() as cb:
        g = EpisodeGroup({"a": ca, "b": cb}, task_id="duo")
        _call(g["a"])
        _call(g["b"])
        cb._episode_call(g["b"].api_key, "/v1/episode/abort")  # b's episode dies before the commit
        with pytest.raises(SwarmHTTPError) as e:
            g.commit(1.0)
        assert e.value.status == 404
        assert ca.group(g.group_id)["state"] == "aborted" and cb.group(g.group_id)["state"] == "aborted"
        assert _pool_ids(ca) == [] and _pool_ids(cb) == []
        assert ca.status()["groups_in_doubt"] == []


@pytest.mark.slow
def test_server_sigkilled_between_prepare_and_commit_resolves_from_its_journal(live_server, tmp_path):
    """b dies after both prepared; a commits, b's commit fails until b restarts from its journal; the
    group then lands on b exactly once (replaying the prepare and committing add it once)."""
    a = live_server()
    run_dir, port = tmp_path / "b", free_port()
    proc = serve_process(run_dir, port)
    url = f"http://127.0.0.1:{port}"
    try:
        with a.client() as ca, SwarmClient(url, ADMIN_TOKEN) as cb:
            cb.configure(SwarmConfig(run_dir=str(run_dir)))
            cb.start(wait=True, timeout=120)
            g = EpisodeGroup({"a": ca, "b": cb}, task_id="duo", commit_timeout_s=120)
            _call(g["a"])
            _call(g["b"])
            g.prepare({"a": 1.0, "b": 0.0})
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

            result: dict = {}
            worker = threading.Thread(target=lambda: result.update(g.finish()))
            worker.start()
            deadline = time.monotonic() + 30
            while ca.group(g.group_id)["state"] != "committed" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert ca.group(g.group_id)["state"] == "committed"  # a committed, b is down: mid-commit
            assert worker.is_alive()

            proc = serve_process(run_dir, port, "--start")  # b resumes with the group in doubt
            worker.join(timeout=120)
            assert not worker.is_alive()
            assert result["a"].accepted and result["b"].accepted
            assert _pool_ids(cb) == [g["b"].episode_id]
            assert cb.status()["groups_in_doubt"] == []

    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_server_that_stays_down_leaves_the_group_in_doubt_and_named(live_server):
    a, b = live_server(), live_server()
    with a.client() as ca, b.client() as cb:
        g = EpisodeGroup({"a": ca, "b": cb}, task_id="duo", commit_timeout_s=1.0)
        _call(g["a"])
        _call(g["b"])
        g.prepare(1.0)
        b.close()  # b stops answering after its prepare
        with pytest.raises(GroupInDoubt, match=b.url) as e:
            g.finish()
        assert e.value.pending == [b.url]
        assert ca.group(g.group_id)["state"] == "committed"  # the decision stands; nothing is undone
        g.abort()  # a no-op once prepared: aborting now would split the group
        assert ca.group(g.group_id)["state"] == "committed"
