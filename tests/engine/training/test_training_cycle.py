"""A real training step through the server: the pool fires, the state machine cycles, weights change,
and inference serves the new weights at once. Parametrised over every registered loss, full and LoRA."""

from __future__ import annotations

import httpx
import pytest

from engine.algorithms import policy_loss_names
from engine.config import SwarmConfig

PROMPT = [{"role": "user", "content": "Say something."}]


def _logprob_of_fixed_reply(srv) -> list[float]:
    """Greedy reply logprobs: they move when (and only when) the serving weights change."""
    with srv.client() as c:
        ep = c.begin_episode("probe", is_eval=True)
        ep.openai().chat.completions.create(model="tiny", messages=PROMPT, max_tokens=6, temperature=0)
        live = srv.server.episodes.get(ep.api_key)
        lp = list(live.tracker.timelines[-1].blocks[-1].logprobs)
        ep.end(0.0)
        return lp


def _play_batch(c, n_tasks: int, group: int, reward_of) -> None:
    for t in range(n_tasks):
        for g in range(group):
            with c.episode(f"task-{t}") as ep:
                ep.openai().chat.completions.create(model="tiny", messages=PROMPT, max_tokens=6, temperature=1.0)
                ep.end(reward_of(t, g))


def _cfg(loss: str, lora: bool) -> SwarmConfig:
    algo = {"policy_loss": loss}
    if loss == "gspo":
        algo.update(clip_low=3e-4, clip_high=4e-4)
    return SwarmConfig(
        pool={"policy": "task_count", "batch_size": 2, "group_size": 2},
        training={"lr": 1e-2, "mini_batch_size": 4, "micro_batch_size": 2},
        lora={"enabled": lora, "rank": 4},
        algorithm=algo,
    )


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("loss", policy_loss_names())
def test_one_step_changes_the_serving_weights(live_server, loss, lora):
    srv = live_server(_cfg(loss, lora))
    before = _logprob_of_fixed_reply(srv)
    with srv.client() as c:
        _play_batch(c, 2, 2, lambda t, g: float(g))  # rewards differ inside each group: non-zero advantages
        st = c.wait_for_step(1, timeout=120)
    assert st["state"] == "ROLLING"
    states = [s.value for _, s in srv.server.sm.history]
    assert states[-4:] == ["ROLLING", "ROLLING_POST", "WEIGHT_SYNCING", "ROLLING"]
    m = st["last_metrics"]
    assert m["episodes"] == 4 and m["reward_mean"] == 0.5 and m["grad_norm"] > 0
    assert st["pool"]["episodes"] == 0
    after = _logprob_of_fixed_reply(srv)
    assert after != pytest.approx(before, abs=1e-6)


def test_uniform_rewards_carry_no_gradient_and_keep_weights(live_server):
    srv = live_server(_cfg("ppo_clip", False))
    before = _logprob_of_fixed_reply(srv)
    with srv.client() as c:
        _play_batch(c, 2, 2, lambda t, g: 1.0)
        st = c.wait_for_step(1, timeout=120)
    assert st["last_metrics"]["grad_norm"] == 0.0
    assert _logprob_of_fixed_reply(srv) == pytest.approx(before, abs=1e-6)


def test_new_episodes_wait_during_weight_sync_and_status_reports_metrics(live_server):
    srv = live_server(_cfg("ppo_clip", False))
    with srv.client() as c:
        _play_batch(c, 2, 2, lambda t, g: float(g))
        # begin_episode retries through ROLLING_POST/WEIGHT_SYNCING (HTTP 503 + Retry-After) transparently
        ep = c.begin_episode("after-sync")
        assert c.status()["state"] in {"ROLLING", "ROLLING_POST", "WEIGHT_SYNCING"}
        ep.abort()
        st = c.wait_for_step(1, timeout=120)
        token = c._http.headers["Authorization"][7:]
    r = httpx.get(srv.url + "/swarm/status", headers={"Authorization": f"Bearer {token}"}).json()
    assert r["global_step"] == 1 and "pg_loss" in r["last_metrics"] and "step_time_s" in st["last_metrics"]
