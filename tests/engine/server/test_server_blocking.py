"""Nothing blocks the event loop or drops an answer: the pool journal's fsync runs on its writer thread,
an end is answered only once durable (retries wait for the same answer), a failed journal write is a
clear refusal, and a keep-alive connection left idle through a training step still gets its answer."""

from __future__ import annotations

import errno
import http.client
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from tests_support import ADMIN_TOKEN

from engine.config import SwarmConfig

MSGS = [{"role": "user", "content": "What is 2 + 3?"}]
# How long a held fsync waits for the test at most, and how long /health may take on a loaded machine while
# it is held: far apart, so the verdict does not depend on the machine's speed.
HOLD_LIMIT_S = 120.0
HEALTH_TIMEOUT_S = 30.0
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _end(url: str, api_key: str, reward: float = 1.0) -> httpx.Response:
    return httpx.post(url + "/v1/episode/end", json={"reward": reward}, headers={"Authorization": f"Bearer {api_key}"}, timeout=60)


class _HeldFsync:
    """os.fsync held until the test releases it (a disk that takes as long as the test wants): the journal
    writer's fsync blocks in whichever thread calls it, so an fsync on the event loop would hold every
    request until `release`. Nothing here depends on how fast the machine is."""

    def __init__(self, monkeypatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        real = os.fsync

        def held(fd: int) -> None:
            self.entered.set()
            self.release.wait(HOLD_LIMIT_S)  # a bound, so a broken test cannot hang the suite
            real(fd)

        monkeypatch.setattr(os, "fsync", held)

    def rearm(self) -> None:
        self.entered.clear()
        self.release.clear()


def _health_answers_while_held(url: str) -> None:
    """/health answers while a journal fsync is held; a loaded 2-core machine answers in well under 30 s,
    a loop stuck in the fsync not before HOLD_LIMIT_S."""
    for _ in range(3):
        try:
            assert httpx.get(url + "/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
        except httpx.TimeoutException:
            pytest.fail(f"/health got no answer in {HEALTH_TIMEOUT_S:g} s while a journal fsync was held: "
                        "the fsync runs on the event loop")
        time.sleep(0.1)


def _first_and_repeat(url: str, fsync: _HeldFsync, call, *repeat_args):
    """`call()`, held in its journal fsync; then `call(*repeat_args)` (a client whose answer was lost) and
    /health while it is held; then the release. Returns both results and whether neither had been answered
    before the release (an answer must wait for its record to be on disk)."""
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(call)
        assert fsync.entered.wait(HOLD_LIMIT_S), "the call never reached its journal fsync"
        repeat = pool.submit(call, *repeat_args)
        _health_answers_while_held(url)
        unanswered = not first.done() and not repeat.done()
        fsync.release.set()
        return first.result(timeout=HOLD_LIMIT_S), repeat.result(timeout=HOLD_LIMIT_S), unanswered


def test_a_slow_fsync_stalls_neither_the_loop_nor_a_retried_end(live_server, tmp_path, monkeypatch):
    """While one end's journal write sits in an fsync, /health answers; the same end sent again meanwhile
    (a client whose answer was lost) gets the same answer, and the episode pools once."""
    srv = live_server(SwarmConfig(run_dir=str(tmp_path / "run")))
    with srv.client() as c:
        ep = c.begin_episode("t")
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        fsync = _HeldFsync(monkeypatch)
        # The retry has a different reward: it must change nothing.
        a, b, unanswered = _first_and_repeat(srv.url, fsync, lambda reward=1.0: _end(srv.url, ep.api_key, reward), 0.0)
    assert unanswered  # the end was answered only once its record was on disk
    assert a.status_code == b.status_code == 200 and a.json() == b.json() and a.json()["accepted"] is True
    assert [e.reward for e in srv.server.pool.groups["t"]] == [1.0]
    adds = [line for line in (tmp_path / "run" / "pool.journal.jsonl").read_text().splitlines() if '"add"' in line]
    assert len(adds) == 1


def test_an_episode_that_cannot_be_journaled_is_refused_with_the_reason(live_server, tmp_path, monkeypatch):
    srv = live_server(SwarmConfig(run_dir=str(tmp_path / "run")))
    with srv.client() as c:
        ep = c.begin_episode("t")
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)

        def disk_full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", disk_full)
        r = _end(srv.url, ep.api_key)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["accepted"] is False and "could not journal" in body["reason"] and "No space" in body["reason"]
        assert len(srv.server.pool) == 0  # not durable, so not trained on
        assert "pool journal write failed" in c.status()["error"]
        assert _end(srv.url, ep.api_key).json() == body  # a retry hears the same


def test_an_idle_keep_alive_connection_gets_its_end_answer_during_weight_syncing(live_server):
    """The lost /v1/episode/end: a client pools a connection, the server spends a training step in
    WEIGHT_SYNCING, and the client's next request on that connection comes more than uvicorn's default
    5 s keep-alive later (the pool expiry of httpx and the openai SDK is also 5 s, so at that instant the
    two race). The server used to close the connection under the request: no answer at all."""
    srv = live_server(SwarmConfig(pool={"policy": "episode_count", "batch_size": 1, "group_size": 1}))
    release = threading.Event()
    backend = srv.server.backend
    real_step = backend.train_step

    def held_step(batch):
        release.wait(60)  # a long training step
        return real_step(batch)

    backend.train_step = held_step
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)  # one connection, reused
    try:
        with srv.client() as c:
            evaluator = c.begin_episode("eval-task", is_eval=True)
            auth = {"Authorization": f"Bearer {evaluator.api_key}", "Content-Type": "application/json"}
            conn.request("POST", "/v1/chat/completions", json.dumps({"messages": MSGS, "max_tokens": 2}), auth)
            assert conn.getresponse().read() and conn.sock is not None  # kept alive
            trainee = c.begin_episode("t")
            trainee.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
            assert trainee.end(1.0).accepted
            c.wait_for_state({"WEIGHT_SYNCING"}, timeout=30)
            time.sleep(6.0)  # idle longer than the 5 s that used to close it
            assert c.status()["state"] == "WEIGHT_SYNCING"
            conn.request("POST", "/v1/episode/end", json.dumps({"reward": 0.0}), auth)
            resp = conn.getresponse()  # http.client.RemoteDisconnected before the fix
            assert resp.status == 200 and json.loads(resp.read())["reason"] == "eval episode: never trained on"
            release.set()
            assert c.wait_for_step(1, timeout=120)["state"] in ("ROLLING", "ROLLING_POST", "WEIGHT_SYNCING")
    finally:
        release.set()
        conn.close()


def test_group_prepare_and_commit_are_answered_only_once_their_records_are_durable(live_server, tmp_path, monkeypatch):
    """Issue 11's two-phase commit over issue 12's journal writer thread: a prepare and a commit (and a
    repeated commit sent while the first one's record sits in a slow fsync) are answered only after the
    record is on disk, without stalling the loop; the journal holds one commit record."""
    srv = live_server(SwarmConfig(run_dir=str(tmp_path / "run")))
    group = "grp-" + "d" * 16
    with srv.client() as c:
        ep = c.begin_episode("t")
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        fsync = _HeldFsync(monkeypatch)
        with ThreadPoolExecutor(1) as pool:
            prepared = pool.submit(ep.prepare, group, 1.0)
            assert fsync.entered.wait(HOLD_LIMIT_S), "the prepare never reached its journal fsync"
            _health_answers_while_held(srv.url)
            assert not prepared.done()  # answered only after its prepare record's fsync
            fsync.release.set()
            prepared.result(timeout=HOLD_LIMIT_S)
        fsync.rearm()
        a, b, unanswered = _first_and_repeat(srv.url, fsync, lambda: c.commit_group(group))
    assert unanswered
    assert a == b and a["state"] == "committed" and [m["accepted"] for m in a["members"]] == [True]
    ops = [json.loads(line)["op"] for line in (tmp_path / "run" / "pool.journal.jsonl").read_text().splitlines()]
    assert ops == ["prepare", "commit"]


def test_a_group_commit_that_cannot_be_journaled_is_a_503_and_its_retry_commits(live_server, tmp_path, monkeypatch):
    srv = live_server(SwarmConfig(run_dir=str(tmp_path / "run")))
    group = "grp-" + "e" * 16
    with srv.client() as c:
        ep = c.begin_episode("t")
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        ep.prepare(group, 1.0)
        real = os.fsync

        def disk_full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", disk_full)
        r = httpx.post(srv.url + f"/swarm/groups/{group}/commit", headers=ADMIN)
        assert r.status_code == 503 and "could not journal the commit" in r.text, r.text
        again = httpx.post(srv.url + f"/swarm/groups/{group}/commit", headers=ADMIN)
        assert again.status_code == 503  # still not durable: never confirmed
        monkeypatch.setattr(os, "fsync", real)
        assert c.commit_group(group)["state"] == "committed"  # the retry writes the record again
    ops = [json.loads(line)["op"] for line in (tmp_path / "run" / "pool.journal.jsonl").read_text().splitlines()]
    assert ops[0] == "prepare" and ops[-1] == "commit"
