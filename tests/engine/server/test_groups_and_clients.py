"""Multi-server episode groups, the per-client throttle, client-agreement policies and the runner."""

from __future__ import annotations

import pytest

from engine.client import EpisodeGroup, SwarmHTTPError, run_episodes
from engine.config import SwarmConfig

MSGS = [{"role": "user", "content": "hi"}]


def _call(ep) -> None:
    ep.openai().chat.completions.create(model=ep.model, messages=MSGS, max_tokens=2)


def test_episode_group_commits_on_every_server(live_server):
    a, b = live_server(), live_server()
    with a.client() as ca, b.client() as cb:
        with EpisodeGroup({"a": ca, "b": cb}, task_id="duo") as g:
            _call(g["a"])
            _call(g["b"])
            out = g.commit({"a": 1.0, "b": 0.0})
        assert out["a"].accepted and out["b"].accepted
        assert ca.pool()["episodes"] == 1 and cb.pool()["episodes"] == 1


def test_episode_group_aborts_everywhere_when_the_workflow_fails(live_server):
    a, b = live_server(), live_server()
    with a.client() as ca, b.client() as cb:
        with pytest.raises(RuntimeError, match="agent crashed"):
            with EpisodeGroup({"a": ca, "b": cb}, task_id="duo") as g:
                _call(g["a"])
                raise RuntimeError("agent crashed")
        for c in (ca, cb):
            st = c.status()
            assert st["pool"]["episodes"] == 0 and st["episodes_live"] == 0
            assert st["episode_counts"]["aborted"] == 1


def test_client_share_throttles_one_client_of_a_task_mix(live_server):
    cfg = SwarmConfig(pool={"policy": "task_count", "batch_size": 2, "group_size": 2, "client_share": {"math": 0.5}})
    srv = live_server(cfg)
    with srv.client("math") as math, srv.client("code") as code:
        for _ in range(2):  # cap = 0.5 * 2 * 2 = 2 episodes from "math" per batch
            with math.episode("m") as ep:
                _call(ep)
                ep.end(1.0)
        with pytest.raises(SwarmHTTPError) as e:
            math.begin_episode("m", wait=0)
        assert e.value.status == 503 and "share" in e.value.reason
        with code.episode("c") as ep:  # other clients are not affected
            _call(ep)
            assert ep.end(1.0).accepted


@pytest.mark.parametrize("policy", ["all_clients_agree", "any_client_agrees"])
def test_agreement_policies_wait_for_clients(live_server, policy):
    srv = live_server(SwarmConfig(pool={"policy": policy, "batch_size": 1, "group_size": 1}))
    with srv.client("c1") as c1, srv.client("c2") as c2:
        c2.heartbeat()
        for c, r in ((c1, 1.0), (c2, 0.0)):
            with c.episode("t") as ep:
                _call(ep)
                ep.end(r)
        c1.agree()
        if policy == "all_clients_agree":
            assert c1.status()["global_step"] == 0 and c1.status()["state"] == "ROLLING"
            c2.agree()
        st = c1.wait_for_step(1, timeout=60)
        assert st["pool"]["episodes"] == 0
        assert not any(v["agree"] for v in st["clients"].values())  # agreement resets after a step


def test_runner_retries_failed_episodes_and_reports_the_rest(live_server):
    srv = live_server()
    attempts: dict[int, int] = {}

    def agent(ep, item):
        attempts[item] = attempts.get(item, 0) + 1
        if item == 3 or (item == 1 and attempts[item] == 1):
            raise ValueError("flaky tool")
        _call(ep)
        return float(item)

    with srv.client() as c:
        res = run_episodes(c, [0, 1, 2, 3], agent, concurrency=2, retries=1, show_progress=False)
        assert res.rewards == [0.0, 1.0, 2.0, None]
        assert attempts == {0: 1, 1: 2, 2: 1, 3: 2}
        assert len(res.failures) == 1 and "item 3" in res.failures[0]
        st = c.status()
        assert st["pool"]["episodes"] == 3 and st["episode_counts"]["aborted"] == 3
