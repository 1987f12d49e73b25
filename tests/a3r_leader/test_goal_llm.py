"""The LLM's reading of a goal, against a real HTTP server replaying scripted replies (the only fake): the same
typed Goal as the offline parser, validated (no value the researcher did not name), the offline parse as the
fallback."""

from __future__ import annotations

import json

import pytest

from a3r.leader.goal_llm import GoalSpec, goal_from_spec
from a3r.leader.goals import GoalParseError, parse_goal
from a3r.leader.llm import LLMPolicy

LR = "swarm.training.lr"


def policy(server) -> LLMPolicy:
    return LLMPolicy(
        base_url=server.url, api_key="sk-test", model="fake-model", skills="", echo=lambda _m: None
    )


def spec(shape, variable, *, values=None, low=None, high=None, **kw) -> str:
    factor = {
        "variable": variable,
        **({"values": values} if values is not None else {"low": low, "high": high}),
    }
    return json.dumps({"shape": shape, "factor": factor, **kw})


FREE_FORM = (
    "I'd like to know if cranking the learning rate to 6e-5 beats 1.5e-5 and 3e-6 when training on sums"
)


def test_the_llm_reads_a_free_form_goal_into_the_typed_goal(fake_llm):
    with pytest.raises(GoalParseError):  # the offline parser cannot read it
        parse_goal(FREE_FORM)
    srv = fake_llm([spec("best", LR, values=[3e-6, 1.5e-5, 6e-5], task="arithmetic")])
    goal = policy(srv).understand(FREE_FORM)
    assert (goal.shape, goal.factor.key, goal.factor.values, goal.task) == (
        "best",
        LR,
        [3e-6, 1.5e-5, 6e-5],
        "arithmetic",
    )
    assert goal.text == FREE_FORM and not goal.refine
    prompt = srv.requests[0]["body"]["messages"][-1]["content"]
    assert "exactly the values studied" in prompt and '"need", "enough", "how small can"' in prompt


def test_values_the_goal_does_not_name_are_fed_back_and_corrected(fake_llm):
    text = "Which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?"
    srv = fake_llm(
        [
            spec("best", LR, values=[3e-6, 1e-5, 1.5e-5, 3e-5, 6e-5]),  # in-between values added
            spec("best", LR, low=1e-6, high=1e-4),  # the default range instead of the named set
            spec("best", LR, values=[3e-6, 1.5e-5, 6e-5]),
        ]
    )
    goal = policy(srv).understand(text)
    assert goal.factor.values == [3e-6, 1.5e-5, 6e-5]
    second, third = (srv.requests[i]["body"]["messages"][-1]["content"] for i in (1, 2))
    assert "has 1e-05, 3e-05, which the goal does not name" in second
    assert "names the learning rate values 3e-06, 1.5e-05, 6e-05: study exactly those" in third


def test_a_goal_naming_no_values_may_use_the_default_range_and_per_unit_values_divide(fake_llm):
    g = goal_from_spec(
        "does the learning rate matter for countdown?",
        GoalSpec.model_validate_json(spec("effect", LR, low=1e-6, high=1e-4, task="countdown")),
    )
    assert (g.factor.low, g.factor.high) == (1e-6, 1e-4)
    text = "how many episodes per batch are enough for arithmetic: 8, 16 or 32?"
    g = goal_from_spec(
        text, GoalSpec.model_validate_json(spec("minimum", "swarm.pool.batch_size", values=[2, 4, 8]))
    )
    assert g.factor.values == [2, 4, 8]  # 8, 16, 32 episodes at the default group size 4


@pytest.mark.parametrize(
    "text, answer",
    [
        (
            "What max_tokens budget does countdown need: 32, 64 or 128?",
            spec("minimum", "max_tokens", values=[32, 64, 128], task="countdown"),
        ),
        (
            "What's the best learning rate for the calculator task, somewhere from 3e-6 to 1e-4?",
            spec("best", LR, low=3e-6, high=1e-4, task="calculator"),
        ),
        (
            "best clip ratio for countdown: 0.1, 0.2 or 0.3",
            spec("best", "swarm.algorithm.clip", values=[0.1, 0.2, 0.3], task="countdown"),
        ),
    ],
)
def test_the_llm_and_the_offline_parser_make_the_same_goal(text, answer):
    llm = goal_from_spec(text, GoalSpec.model_validate_json(answer))
    offline = parse_goal(text)
    assert llm.model_dump(exclude={"assumptions"}) == offline.model_dump(exclude={"assumptions"})


def test_an_endpoint_giving_nothing_usable_falls_back_to_the_offline_parse(fake_llm):
    srv = fake_llm(["no", "still no", "{}"])
    goal = policy(srv).understand("What max_tokens budget does countdown need: 32, 64 or 128?")
    assert (goal.shape, goal.factor.values) == ("minimum", [32, 64, 128])
    assert any(a.startswith("read by the offline parser") for a in goal.assumptions)
    srv = fake_llm(["no", "still no", "{}"])
    with pytest.raises(GoalParseError, match=r"the LLM failed .* and it names no variable to study"):
        policy(srv).understand("make the widgets sparkle")
