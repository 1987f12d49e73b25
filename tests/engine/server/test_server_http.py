"""The swarm server over real HTTP with the tiny model: auth, key isolation, errors, deadlines, SDKs."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from engine.client import SwarmHTTPError
from engine.config import SwarmConfig

MSGS = [{"role": "user", "content": "What is 2 + 3?"}]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_health_models_and_openapi(live_server):
    srv = live_server()
    assert httpx.get(srv.url + "/health").json() == {"ok": True, "state": "ROLLING"}
    schema = httpx.get(srv.url + "/openapi.json").json()
    assert "/v1/chat/completions" in schema["paths"] and "/swarm/episodes" in schema["paths"]
    with srv.client() as c:
        ep = c.begin_episode("t")
        models = httpx.get(ep.base_url + "/models", headers=_auth(ep.api_key)).json()
        assert models["data"][0]["id"] == "tiny"
        ep.abort()


def test_control_plane_needs_the_admin_token(live_server):
    srv = live_server()
    for method, path in [("get", "/swarm/status"), ("post", "/swarm/stop"), ("post", "/swarm/start"), ("post", "/swarm/episodes")]:
        r = getattr(httpx, method)(srv.url + path)
        assert r.status_code == 401, path
        assert "Authorization" in r.json()["error"]["message"]
        r = getattr(httpx, method)(srv.url + path, headers=_auth("sk-admin-wrong"))
        assert r.status_code == 401
    # an episode key is not an admin token
    with srv.client() as c:
        ep = c.begin_episode("t")
        assert httpx.post(srv.url + "/swarm/stop", headers=_auth(ep.api_key)).status_code == 401
        assert c.status()["state"] == "ROLLING"
        ep.abort()


def test_episode_keys_are_isolated(live_server):
    srv = live_server()
    with srv.client() as c:
        a, b = c.begin_episode("task-a"), c.begin_episode("task-b")
        assert a.api_key != b.api_key and len(a.api_key) > 40
        la = a.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=4, temperature=0)
        assert la.choices[0].message is not None
        # ending A with A's key enters only A; B's recorded calls are untouched and B can still be used
        assert a.end(1.0).accepted
        with pytest.raises(openai.NotFoundError):
            a.openai(max_retries=0).chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        # ending A again answers as the first time (a retry after a lost response) and adds nothing
        r = httpx.post(srv.url + "/v1/episode/end", json={"reward": 0.0}, headers=_auth(a.api_key))
        assert r.status_code == 200 and r.json()["accepted"] and r.json()["episode_id"] == a.episode_id
        b.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        assert b.end(0.0).accepted
        pool = httpx.get(srv.url + "/swarm/pool/episodes", headers=_auth(c._http.headers["Authorization"][7:])).json()
        by_task = {e["task_id"]: e for e in pool["episodes"]}
        assert by_task["task-a"]["reward"] == 1.0 and by_task["task-b"]["reward"] == 0.0
        assert len(by_task["task-a"]["timelines"]) == 1 and len(by_task["task-b"]["timelines"]) == 1
        # a forged key is rejected
        r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": MSGS}, headers=_auth(a.api_key[:-2] + "xx"))
        assert r.status_code == 404


@pytest.mark.parametrize(
    "body,status,fragment",
    [
        ({"messages": []}, 422, "messages"),
        ({"messages": MSGS, "n": 0}, 422, "n"),
        ({"messages": MSGS, "temperature": -1}, 422, "temperature"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "role"),
        ({"messages": MSGS, "max_tokens": 10**6}, 400, "max_context_tokens"),
    ],
)
def test_bad_requests_get_4xx_with_a_reason(live_server, body, status, fragment):
    srv = live_server()
    with srv.client() as c:
        ep = c.begin_episode("t")
        r = httpx.post(ep.base_url + "/chat/completions", json=body, headers=_auth(ep.api_key))
        assert r.status_code == status, r.text
        assert fragment in r.json()["error"]["message"]
        # the bad request lost nothing: the episode is still usable
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        assert ep.end(1.0).accepted


def test_bad_config_and_illegal_transitions_are_rejected(live_server):
    srv = live_server()
    with srv.client() as c:
        with pytest.raises(SwarmHTTPError) as e:
            c.configure({"training": {"micro_batch_size": 64, "mini_batch_size": 8}})
        assert e.value.status == 400 and "micro_batch_size" in e.value.reason
        with pytest.raises(SwarmHTTPError) as e:
            c.configure(SwarmConfig())  # only while OFFLINE
        assert e.value.status == 503
        with pytest.raises(SwarmHTTPError) as e:
            c.start(wait=False)  # ROLLING -> BOOTING is not a transition
        assert e.value.status == 409 and "ROLLING" in e.value.reason
        c.stop()
        assert c.status()["state"] == "OFFLINE"
        with pytest.raises(SwarmHTTPError) as e:
            c.begin_episode("t", wait=0)
        assert e.value.status == 503


def test_idle_and_total_deadlines_abort_and_leave_no_trace(live_server):
    cfg = SwarmConfig(episodes={"idle_timeout_s": 0.4, "total_timeout_s": 1.5})
    srv = live_server(cfg)
    with srv.client() as c:
        idle = c.begin_episode("idle")
        idle.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        busy = c.begin_episode("busy")
        time.sleep(1.0)
        with pytest.raises(SwarmHTTPError) as e:
            idle.end(1.0)
        assert e.value.status == 404
        # keep "busy" active so only the total deadline can expire it
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                busy.openai(max_retries=0).chat.completions.create(model="tiny", messages=MSGS, max_tokens=1)
            except Exception:
                break
            time.sleep(0.1)
        st = c.status()
        assert st["episode_counts"]["expired"] == 2
        assert st["pool"]["episodes"] == 0 and st["state"] == "ROLLING"


def test_eval_episodes_never_enter_the_pool(live_server):
    srv = live_server()
    with srv.client() as c:
        ep = c.begin_episode("t", is_eval=True)
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        out = ep.end(1.0)
        assert not out.accepted and "eval" in out.reason
        assert c.pool()["episodes"] == 0


def test_openai_sdk_langchain_and_raw_http_record_identical_tokens(live_server):
    from langchain_openai import ChatOpenAI

    srv = live_server()
    with srv.client() as c:
        eps = {name: c.begin_episode(f"same-{name}") for name in ("openai", "langchain", "raw")}
        eps["openai"].openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=8, temperature=0)
        llm = ChatOpenAI(base_url=eps["langchain"].base_url, api_key=eps["langchain"].api_key, model="tiny", temperature=0, max_tokens=8)
        llm.invoke([("user", MSGS[0]["content"])])
        r = httpx.post(
            eps["raw"].base_url + "/chat/completions",
            json={"model": "tiny", "messages": MSGS, "max_tokens": 8, "temperature": 0},
            headers=_auth(eps["raw"].api_key),
        )
        assert r.status_code == 200
        for ep in eps.values():
            ep.end(1.0)
        token = c._http.headers["Authorization"][7:]
        pool = httpx.get(srv.url + "/swarm/pool/episodes", headers=_auth(token)).json()["episodes"]
    tokens = {e["task_id"]: [b["token_ids"] for b in e["timelines"][0]["blocks"]] for e in pool}
    logprobs = {e["task_id"]: [b["logprobs"] for b in e["timelines"][0]["blocks"]] for e in pool}
    assert tokens["same-openai"] == tokens["same-langchain"] == tokens["same-raw"]
    assert logprobs["same-openai"] == logprobs["same-raw"]


def test_streaming_is_real_sse_and_matches_the_non_streamed_reply(live_server):
    srv = live_server()
    with srv.client() as c:
        ep = c.begin_episode("stream")
        llm = ep.openai()
        full = llm.chat.completions.create(model="tiny", messages=MSGS, max_tokens=12, temperature=0)
        chunks = list(
            llm.chat.completions.create(
                model="tiny", messages=MSGS, max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}
            )
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert text == full.choices[0].message.content
        assert sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content) >= 2  # arrives piecewise
        assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
        ep.end(0.5)


def test_tool_calls_round_trip_through_the_openai_sdk(live_server):
    from engine.tasks.calculator import TOOLS

    srv = live_server()
    with srv.client() as c:
        ep = c.begin_episode("tools")
        llm = ep.openai()
        history = [
            {"role": "user", "content": "What is 12 * 3?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": "12*3"})}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "36"},
        ]
        out = llm.chat.completions.create(model="tiny", messages=history, tools=TOOLS, max_tokens=4, temperature=0)
        assert out.choices[0].finish_reason in {"stop", "length", "tool_calls"}
        assert ep.end(1.0).accepted


def test_a_repeated_end_gets_the_first_answer_and_pools_once(live_server):
    """A client whose end response was lost retries it: same answer, one pool entry, no error."""
    srv = live_server(SwarmConfig(pool={"batch_size": 100}))
    with srv.client() as c:
        ep = c.begin_episode("t")
        ep.openai().chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        headers = {"Authorization": f"Bearer {ep.api_key}"}
        first = httpx.post(srv.url + "/v1/episode/end", json={"reward": 1.0}, headers=headers)
        again = httpx.post(srv.url + "/v1/episode/end", json={"reward": 0.0}, headers=headers)
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json() and first.json()["accepted"] is True
        assert c.status()["pool"]["episodes"] == 1
        assert srv.server.pool.groups["t"][0].reward == 1.0  # the retry changed nothing
        # a key that never ended is still unknown, and a finished episode takes no more calls
        bad = httpx.post(srv.url + "/v1/episode/end", json={"reward": 1.0}, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 404
        with pytest.raises(openai.NotFoundError):
            ep.openai(max_retries=0).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
