"""The LLM policy against a real HTTP server replaying scripted replies, malformed ones included."""

from __future__ import annotations

import json

import pytest

from a3r.analysis import RunObs, analyse
from a3r.leader.design import ResearchBudget, first_stage
from a3r.leader.factory import make_policy
from a3r.leader.goals import parse_goal
from a3r.leader.llm import LLMPolicy
from a3r.leader.policy import OfflinePolicy
from a3r.report import question_of

# the numbers of the studied variables are the researcher's: the LLM may not invent them (a3r.leader.goal_llm)
GOAL_TEXT = (
    "what is the smallest batch size (1 to 16) that trains arithmetic in about 20 steps, and does a max "
    "tokens of 16 or 64 change it?"
)
GOAL_JSON = json.dumps(
    {
        "shape": "minimum",
        "factor": {"variable": "swarm.pool.batch_size", "low": 1, "high": 16},
        "secondary": {"variable": "max_tokens", "values": [16, 64]},
        "task": "arithmetic",
        "statistic": "auc",
        "criterion": {"kind": "relative", "value": 0.9},
        "assumptions": ["'about 20 steps' read as 20 steps"],
        "steps": 20,
    }
)
BUDGET = ResearchBudget(max_runs=20, steps=5, seeds=2, min_seeds=2, max_seeds=3)


def policy(server, **kw):
    return LLMPolicy(
        base_url=server.url, api_key="sk-test", model="fake-model", skills="SKILLS-CONTEXT", **kw
    )


def messages(server, i):
    return server.requests[i]["body"]["messages"]


def test_understand_retries_malformed_and_invalid_replies_feeding_the_error_back(fake_llm):
    srv = fake_llm(
        [
            "Sure! Here is the plan: {shape: minimum",  # not JSON
            json.dumps(
                {"shape": "minimum", "factor": {"variable": "swarm.pool.widgets", "low": 1, "high": 8}}
            ),
            "```json\n" + GOAL_JSON + "\n```",  # fenced: accepted
        ]
    )
    goal = policy(srv).understand(GOAL_TEXT)
    assert (
        goal.shape == "minimum"
        and goal.factor.key == "swarm.pool.batch_size"
        and goal.secondary.values == [16, 64]
    )
    assert goal.steps == 20 and goal.text == GOAL_TEXT
    assert len(srv.requests) == 3
    second, third = messages(srv, 1), messages(srv, 2)
    assert second[-2] == {"role": "assistant", "content": "Sure! Here is the plan: {shape: minimum"}
    assert "invalid" in second[-1]["content"] and "JSON" in second[-1]["content"]
    assert "unknown variable 'swarm.pool.widgets'" in third[-1]["content"]
    req = srv.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "fake-model" and req["body"]["response_format"] == {"type": "json_object"}
    system = messages(srv, 0)[0]["content"]
    assert "SKILLS-CONTEXT" in system and "swarm.pool.batch_size" in system  # skills and variables as context


def test_understand_falls_back_to_the_offline_parser(fake_llm):
    srv = fake_llm(["nope", "still nope", "{}"])
    goal = policy(srv).understand("find the smallest batch size that still trains arithmetic (1 to 8)")
    assert goal.factor.high == 8 and any("offline parser" in a for a in goal.assumptions)
    assert len(srv.requests) == 3


def test_the_default_skills_context_is_the_projects_skills(fake_llm):
    srv = fake_llm([GOAL_JSON])
    LLMPolicy(base_url=srv.url, api_key="k", model="m").understand(GOAL_TEXT)
    system = messages(srv, 0)[0]["content"]
    for name in (
        "plan-research",
        "execute-blueprint",
        "monitor-with-tmux",
        "swarm-configuration",
        "write-swarm-client",
    ):
        assert f"name: {name}" in system


def test_first_stage_assigns_seeds_and_validates_values(fake_llm):
    goal = parse_goal("find the smallest batch size that still trains arithmetic (1 to 16)")
    bad = {"action": "continue", "reason": "grid", "arms": [{"x": 2.5, "n_seeds": 2, "why": "half"}]}
    good = {
        "action": "continue",
        "reason": "coarse grid",
        "purpose": "grid",
        "hypothesis": "small fails",
        "arms": [{"x": 1, "n_seeds": 2, "why": "low"}, {"x": 16, "n_seeds": 2, "why": "high"}],
    }
    srv = fake_llm([json.dumps(bad), json.dumps(good)])
    design = policy(srv).plan_stage(goal, BUDGET, [], None)
    assert [(a.x, a.seeds) for a in design.arms] == [(1, [0, 1]), (16, [0, 1])]
    assert design.index == 1 and design.steps == BUDGET.steps and design.author == "llm:fake-model"
    assert "whole number" in messages(srv, 1)[-1]["content"]
    assert "The deterministic design proposes" in messages(srv, 0)[1]["content"]


def _evidence(goal, design):
    obs = [
        RunObs(i, 1, s, a.x, a.level, f"bs={a.x}", "succeeded", ((1, 0.0), (2, 0.1 * a.x)))
        for i, (a, s) in enumerate(((a, s) for a in design.arms for s in a.seeds), 1)
    ]
    return analyse(question_of(goal), obs)


def test_decide_enforces_the_budget_then_accepts_finish(fake_llm):
    goal = parse_goal("find the smallest batch size that still trains arithmetic (1 to 16)")
    s1 = first_stage(goal, BUDGET)
    ev = _evidence(goal, s1)
    greedy = {"action": "continue", "reason": "more", "arms": [{"x": 16, "n_seeds": 5, "why": "lots"}]}
    srv = fake_llm([json.dumps(greedy), json.dumps({"action": "finish", "reason": "settled"})])
    d = policy(srv).decide(goal, BUDGET, [s1], ev)
    assert (d.action, d.reason, d.author) == ("finish", "settled", "llm:fake-model")
    assert "max_seeds=3" in messages(srv, 1)[-1]["content"]
    assert "Evidence so far (from the store)" in messages(srv, 0)[1]["content"]


def test_decide_continues_with_seeds_after_the_used_ones(fake_llm):
    goal = parse_goal("find the smallest batch size that still trains arithmetic (1 to 16)")
    s1 = first_stage(goal, BUDGET)
    reply = {
        "action": "continue",
        "reason": "narrow",
        "arms": [{"x": 16, "n_seeds": 1, "why": "confirm"}, {"x": 6, "n_seeds": 2, "why": "new"}],
    }
    srv = fake_llm([json.dumps(reply)])
    d = policy(srv).decide(goal, BUDGET, [s1], _evidence(goal, s1))
    assert d.action == "continue" and d.next_stage.index == 2
    assert [(a.x, a.seeds) for a in d.next_stage.arms] == [(16, [2]), (6, [0, 1])]


def test_server_errors_and_garbage_fall_back_to_the_offline_decision(fake_llm):
    goal = parse_goal("find the smallest batch size that still trains arithmetic (1 to 16)")
    s1 = first_stage(goal, BUDGET)
    ev = _evidence(goal, s1)
    srv = fake_llm([500, 500, 500])  # the SDK retries twice, then raises
    d = policy(srv).decide(goal, BUDGET, [s1], ev)
    offline = OfflinePolicy().decide(goal, BUDGET, [s1], ev)
    assert d.author.startswith("offline (LLM fallback") and d.action == offline.action
    assert d.next_stage == offline.next_stage
    srv2 = fake_llm(["[]", "x", '{"action": "maybe"}'])
    assert policy(srv2).decide(goal, BUDGET, [s1], ev).author.startswith("offline (LLM fallback")


def test_narrate_returns_sections_and_tolerates_failure(fake_llm):
    goal = parse_goal("find the smallest batch size that still trains arithmetic (1 to 16)")
    ev = _evidence(goal, first_stage(goal, BUDGET))
    srv = fake_llm([json.dumps({"sections": {"summary": "Small batches lag."}}), "junk", "junk", "junk"])
    p = policy(srv)
    assert p.narrate(goal, ev, []) == {"summary": "Small batches lag."}
    assert p.narrate(goal, ev, []) == {}


def test_make_policy_reads_the_environment(monkeypatch):
    monkeypatch.delenv("A3R_LLM_BASE_URL", raising=False)
    assert isinstance(make_policy(), OfflinePolicy)
    monkeypatch.setenv("A3R_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("A3R_LLM_MODEL", raising=False)
    with pytest.raises(ValueError, match="A3R_LLM_MODEL"):
        make_policy()
    monkeypatch.setenv("A3R_LLM_MODEL", "m")
    p = make_policy()
    assert isinstance(p, LLMPolicy) and p.name == "llm:m"
    assert isinstance(make_policy(offline=True), OfflinePolicy)


def test_goal_settings_from_the_llm_are_validated(fake_llm):
    bad_task = json.loads(GOAL_JSON) | {"task": "aime"}
    bad_fixed = json.loads(GOAL_JSON) | {"fixed": {"swarm.pool.widgets": 3}}
    srv = fake_llm(
        [
            json.dumps(bad_task),
            json.dumps(bad_fixed),
            json.dumps(json.loads(GOAL_JSON) | {"fixed": {"lr": "3e-5"}}),
        ]
    )
    goal = policy(srv).understand(GOAL_TEXT)
    assert goal.fixed == {"swarm.training.lr": 3e-5}  # an alias becomes its key, the value its type
    assert "'aime' is not a built-in task" in messages(srv, 1)[-1]["content"]
    assert "fixed setting 'swarm.pool.widgets'" in messages(srv, 2)[-1]["content"]


def test_an_endpoint_that_rejects_json_mode_is_reported_once_and_still_asked(fake_llm):
    goal = parse_goal("find the smallest batch size that still trains arithmetic (1 to 16)")
    stage = {"action": "continue", "reason": "grid", "arms": [{"x": 1, "n_seeds": 1, "why": "low"}]}
    srv = fake_llm([400, GOAL_JSON, json.dumps(stage)])  # 400 in JSON mode, answered without it
    said: list[str] = []
    p = policy(srv, echo=said.append)
    assert p.understand(GOAL_TEXT).factor.key == "swarm.pool.batch_size"
    assert p.plan_stage(goal, BUDGET, [], None).author == "llm:fake-model"  # the LLM, not the fallback
    assert [("response_format" in r["body"]) for r in srv.requests] == [True, False, False]
    assert len(said) == 1
    assert said[0].startswith(f"llm:fake-model: the endpoint {srv.url} rejected response_format=")
    assert (
        '{"type": "json_object"} (HTTP 400: ' in said[0] and "asking for JSON in the prompt only" in said[0]
    )


def test_a_bad_request_not_about_json_mode_falls_back_and_says_so(fake_llm):
    goal = parse_goal("find the smallest batch size that still trains arithmetic (1 to 16)")
    srv = fake_llm([400, 400, 400, 400])  # rejected with and without response_format: the request is at fault
    said: list[str] = []
    p = policy(srv, echo=said.append)
    design = p.plan_stage(goal, BUDGET, [], None)
    assert design.arms == first_stage(goal, BUDGET).arms and design.author.startswith("offline (LLM fallback")
    assert p.narrate(goal, _evidence(goal, design), []) == {}
    assert [("response_format" in r["body"]) for r in srv.requests] == [True, False, True, False]
    assert len(said) == 2 and not any("rejected response_format" in s for s in said)
    assert said[0].startswith("llm:fake-model gave no usable design of stage 1 (")
    assert said[1].startswith("llm:fake-model gave no usable report prose (")
