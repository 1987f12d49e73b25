"""The swarm server over real HTTP with the tiny model: auth, key isolation, errors, deadlines, SDKs."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
import torch

from engine.backends.torch.inference import DEFAULT_MAX_BATCH_ROWS
from engine.client import SwarmHTTPError
from engine.config import SwarmConfig
from engine.server.episodes import EpisodeRegistry

MSGS = [{"role": "user", "content": "What is 2 + 3?"}]


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_health_models_and_openapi(live_server):
    srv = live_server()
    # A fresh server: its engine's batch bound, and no pass run yet.
    inference = {"max_batch_rows": DEFAULT_MAX_BATCH_ROWS, "decode_passes": 0, "max_rows": 0, "tokens_generated": 0}
    health = {"ok": True, "state": "ROLLING", "error": None, "torch_threads": torch.get_num_threads(), "inference": inference}
    assert httpx.get(srv.url + "/health").json() == health
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
        # a forged key is rejected as bad credentials
        r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": MSGS}, headers=_auth(a.api_key[:-2] + "xx"))
        assert r.status_code == 401


def _assert_openai_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "code"} and err["code"] == code and err["message"]
    return err


def test_unknown_keys_get_401_and_finished_episodes_404_in_openai_shape(live_server):
    """OpenAI clients, gateways and retry policies read 401 as bad credentials: a key never issued (or
    forged) is that; 404 is kept for a real episode that is over, so a client can tell the two apart."""
    srv = live_server()
    body = {"messages": MSGS, "max_tokens": 2}
    routes = [("get", "/v1/models", None), ("post", "/v1/chat/completions", body),
              ("post", "/v1/episode/end", {"reward": 1.0}), ("post", "/v1/episode/abort", {})]
    with srv.client() as c:
        live = c.begin_episode("t")
        for method, path, json_body in routes:
            for headers in [_auth(live.api_key[:-4] + "abcd"), _auth("sk-anything"), {}]:
                r = httpx.request(method, srv.url + path, json=json_body, headers=headers)
                assert _assert_openai_error(r, 401, "invalid_api_key")["type"] == "authentication_error", path
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=live.base_url, api_key="sk-forged", max_retries=0).chat.completions.create(
                model="tiny", messages=MSGS, max_tokens=2
            )
        live.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)  # still usable
        assert live.end(1.0).accepted
        aborted = c.begin_episode("t")
        aborted.abort()
        for ep, how in [(live, "ended"), (aborted, "aborted")]:
            for method, path, json_body in routes[:2] + routes[3:]:
                r = httpx.request(method, srv.url + path, json=json_body, headers=_auth(ep.api_key))
                err = _assert_openai_error(r, 404, "episode_finished")
                assert ep.episode_id in err["message"] and how in err["message"], path
        with pytest.raises(openai.NotFoundError):
            live.openai(max_retries=0).chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)


def test_leaving_an_episode_the_server_forgot_in_a_restart_does_not_raise(live_server):
    """After a restart the old key is unknown (401): the `with` block's abort has nothing to undo."""
    srv = live_server()
    with srv.client() as c:
        with c.episode("t") as ep:
            c.stop()
            c.start(wait=True, timeout=120)
            r = httpx.post(srv.url + "/v1/episode/abort", headers=_auth(ep.api_key))
            assert r.status_code == 401
        assert ep.outcome is not None and not ep.outcome.accepted


def test_an_os_permission_error_inside_a_request_is_a_server_error_not_401(live_server, monkeypatch):
    """Only failed credentials answer 401: an OS PermissionError while serving (say the pool journal
    became unwritable) is the server's fault, and a client must not be told its key is bad."""
    srv = live_server()

    def unwritable(episode):
        raise PermissionError(13, "Permission denied", "pool.journal.jsonl")

    monkeypatch.setattr(srv.server.pool, "add", unwritable)
    with srv.client() as c:
        ep = c.begin_episode("t")
        ep.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        r = httpx.post(srv.url + "/v1/episode/end", json={"reward": 1.0}, headers=_auth(ep.api_key))
        assert r.status_code == 500


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


def test_idle_deadline_aborts_and_leaves_no_trace(live_server):
    # No deadline runs while the episodes are set up (on a loaded machine the gap between begin and the first call
    # can outlast any short one); then the deadline drops to 0.4 s, and both must expire by the sweep.
    cfg = SwarmConfig(episodes={"idle_timeout_s": 600, "total_timeout_s": 3600})
    srv = live_server(cfg)
    with srv.client() as c:
        called = c.begin_episode("called")
        called.openai().chat.completions.create(model="tiny", messages=MSGS, max_tokens=2)
        never_called = c.begin_episode("never-called")
        srv.server.episodes.idle_timeout_s = 0.4  # a float assignment: the sweep reads it on its next pass
        deadline = time.monotonic() + 30
        while c.status()["episodes_live"] and time.monotonic() < deadline:
            time.sleep(0.1)
        for ep in (called, never_called):
            with pytest.raises(SwarmHTTPError) as e:
                ep.end(1.0)
            assert e.value.status == 404 and "expired" in e.value.reason
        st = c.status()
        assert st["episode_counts"]["expired"] == 2
        assert st["pool"]["episodes"] == 0 and st["state"] == "ROLLING"


def test_total_deadline_expires_an_episode_that_never_idles(live_server):
    """Calls every 0.1 s keep the episode far from its idle deadline (4 s: a loaded machine's slowest gap between
    calls stays well inside it), so only the total deadline (6 s) can end it: it must, and not before."""
    idle, total = 4.0, 6.0
    cfg = SwarmConfig(episodes={"idle_timeout_s": idle, "total_timeout_s": total})
    srv = live_server(cfg)
    with srv.client() as c:
        begun = time.monotonic()  # before the server starts the episode's clock
        busy = c.begin_episode("busy")
        llm = busy.openai(max_retries=0)
        last_ok = begun
        while time.monotonic() - begun < 60:
            # A call in flight holds off the idle deadline, so only the gaps between calls count.
            assert time.monotonic() - last_ok < idle, "a gap between calls was long enough to idle out"
            try:
                llm.chat.completions.create(model="tiny", messages=MSGS, max_tokens=1)
            except openai.NotFoundError as e:
                assert "expired" in str(e)
                expired_at = time.monotonic()
                break
            last_ok = time.monotonic()
            time.sleep(0.1)
        else:
            raise AssertionError("the episode outlived its total deadline")
        # Not before the total deadline (the server's clock started after `begun`), and past the idle one: only
        # the total deadline can have ended it.
        assert expired_at - begun >= total and last_ok - begun > idle
        st = c.status()
        assert st["episode_counts"]["expired"] == 1 and st["episodes_live"] == 0
        assert st["pool"]["episodes"] == 0


def test_a_call_in_flight_holds_off_the_idle_deadline_but_not_the_total_one():
    reg = EpisodeRegistry(idle_timeout_s=10, total_timeout_s=100)
    ep = reg.begin("t", "c", False, {})
    ep.calls_in_flight = 1  # a generation that runs for a long time
    assert reg.expired(now=ep.started_at + 50) == []  # idle for 50 s, but waiting on the model
    assert reg.expired(now=ep.started_at + 101) == [ep]


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


@pytest.mark.parametrize("exact", [True, False])
def test_a_re_sent_reply_is_matched_to_what_the_episode_sampled(live_server, exact):
    srv = live_server(SwarmConfig(episodes={"exact_history": exact}))
    with srv.client() as c:
        ep = c.begin_episode("two-calls")
        llm = ep.openai()
        first = llm.chat.completions.create(model="tiny", messages=MSGS, max_tokens=6, temperature=0)
        reply = first.choices[0]
        history = [*MSGS, {"role": "assistant", "content": reply.message.content}, {"role": "user", "content": "And?"}]
        llm.chat.completions.create(model="tiny", messages=history, max_tokens=2, temperature=0)
        counts = c.status()["history"]
        ep.end(1.0)
    if not exact:
        assert counts == {"replaced": 0, "identical": 0, "fallback": 0, "closed": 0}
    elif reply.finish_reason == "length":  # cut: fed as sampled, then the template's end of turn
        assert counts == {"replaced": 0, "identical": 0, "fallback": 0, "closed": 1}
    else:
        assert counts["replaced"] + counts["identical"] == 1 and counts["fallback"] == counts["closed"] == 0


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
        # a key never issued is bad credentials, and a finished episode takes no more calls
        bad = httpx.post(srv.url + "/v1/episode/end", json={"reward": 1.0}, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401
        with pytest.raises(openai.NotFoundError):
            ep.openai(max_retries=0).chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
