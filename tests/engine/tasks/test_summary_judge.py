"""The `judged_summary` task graded by a real LLM judge: a swarm server with the tiny model, and the judge's calls
kept out of training, checked in the trainable server's pool after episodes that used the judge.

The tiny model's random weights never write 'Score: N', so every grade here is the fallback (that is the
failure path a weak judge takes): under fallback=default the episode trains with the documented default
score, under fallback=exclude it is aborted and never reaches the pool. Either way the policy server's
pool holds the policy's own call only, never the judge's prompt (its rubric and the reply under grading).
"""

from __future__ import annotations

import pytest
from tests_support import ADMIN_TOKEN

from engine.client.runner import run_episodes
from engine.rewards import JudgeConfig, LLMJudge, ParseMode
from engine.rewards.judge import JUDGE_TASK_ID
from engine.tasks.registry import get_task
from engine.tasks.summary import Summary

SAMPLING = {"max_tokens": 8, "temperature": 1.0}


def _pool(client) -> list[dict]:
    return client._http.get("/swarm/pool/episodes").json()["episodes"]


def _texts(episode: dict) -> str:
    return "\n".join(b["text"] for t in episode["timelines"] for b in t["blocks"])


def _judge_free(episode: dict, rubric: str) -> bool:
    """The episode holds the policy's call alone: one timeline with the task's prompt, no judge prompt."""
    text = _texts(episode)
    return (len(episode["timelines"]) == 1 and "Summarise this text in one sentence." in text
            and rubric not in text and "<reply>" not in text)


def _judge(url: str, **fields) -> LLMJudge:
    return LLMJudge(JudgeConfig(swarm_url=url, model="tiny", parse=ParseMode.LABELLED, max_tokens=6, timeout_s=120,
                                retries=0, **fields))


def test_judge_calls_never_enter_the_trainable_pool(live_server, monkeypatch):
    monkeypatch.setenv("SWARM_JUDGE_ADMIN_TOKEN", ADMIN_TOKEN)
    policy, judge_srv = live_server(), live_server()
    items = Summary().dataset(2, seed=0)
    pc, jc = policy.client("trainer"), judge_srv.client("watcher")

    # 1. the judge on a second swarm server, fallback=default: both episodes train with the default grade
    judge = _judge(judge_srv.url, fallback="default", default_score=0.5)
    task = Summary(judge)
    res = run_episodes(pc, items, lambda ep, it: task.run(ep.openai(max_retries=0), ep.model, it, SAMPLING),
                       task_id=lambda it: it.id, concurrency=1, retries=0, show_progress=False)
    assert res.failures == [] and res.rewards == [0.5, 0.5]
    assert judge.counts["calls"] == 2 and judge.counts["fallbacks"] == 2
    pool = _pool(pc)
    assert len(pool) == 2 and all(_judge_free(e, judge.cfg.rubric) for e in pool)
    # the judge server trained on nothing: its calls were eval episodes, aborted after the answer
    assert _pool(jc) == [] and jc.status()["episode_counts"].get("aborted") == 2

    # 2. the judge on the trainable server itself, fallback=exclude: the episodes are aborted, the pool
    #    is unchanged, and the judge's own eval episodes left nothing in it either
    judge = _judge(policy.url, fallback="exclude")
    task = Summary(judge)
    res = run_episodes(pc, items, lambda ep, it: task.run(ep.openai(max_retries=0), ep.model, it, SAMPLING),
                       task_id=lambda it: it.id, concurrency=1, retries=0, show_progress=False)
    assert res.rewards == [None, None] and all("JudgeUnavailable" in f for f in res.failures)
    after = _pool(pc)
    assert sorted(e["episode_id"] for e in after) == sorted(e["episode_id"] for e in pool)
    assert all(e["task_id"] != JUDGE_TASK_ID for e in after)

    # 3. the check can fail: a planted leaky judge that grades through the policy episode's own key is
    #    recorded in that episode, and _judge_free says so
    def leaky(ep, it):
        llm = ep.openai(max_retries=0)

        def chat(messages):
            out = llm.chat.completions.create(model=ep.model, messages=messages, max_tokens=6, temperature=0.0)
            return out.choices[0].message.content or ""

        cfg = JudgeConfig(swarm_url=policy.url, model="tiny", parse=ParseMode.LABELLED, retries=0,
                          fallback="default", default_score=0.5)
        return Summary(LLMJudge(cfg, chat=chat)).run(llm, ep.model, it, SAMPLING)

    res = run_episodes(pc, items[:1], leaky, task_id=lambda it: "leaky:" + it.id, concurrency=1, retries=0,
                       show_progress=False)
    assert res.rewards == [0.5]
    leaked = [e for e in _pool(pc) if e["task_id"].startswith("leaky:")]
    assert len(leaked) == 1 and not _judge_free(leaked[0], judge.cfg.rubric)


def test_summary_is_a_built_in_task_that_names_its_missing_judge(monkeypatch):
    from engine.errors import ConfigError

    for k in ("SWARM_JUDGE_BASE_URL", "SWARM_JUDGE_SWARM_URL", "SWARM_JUDGE_MODEL"):
        monkeypatch.delenv(k, raising=False)
    task = get_task("judged_summary")
    items = task.dataset(50, seed=1)
    assert len({it.id for it in items}) > 40 and all(it.answer in it.prompt for it in items)
    assert items == task.dataset(50, seed=1)
    with pytest.raises(ConfigError, match="SWARM_JUDGE_SWARM_URL"):
        _ = task.judge


def test_the_documented_summary_job_is_valid():
    from pathlib import Path

    from engine.jobs import TrainJob

    job = TrainJob.from_yaml(Path(__file__).resolve().parents[3] / "docs" / "jobs" / "judged_summary.yaml")
    assert job.task == "judged_summary"
