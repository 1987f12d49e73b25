"""The offline goal parser: many phrasings of each question shape, and errors that say what was understood."""

from __future__ import annotations

import pytest

from a3r.leader.goals import Criterion, Goal, GoalParseError, parse_goal
from a3r.leader.knobs import KNOBS, find_knob, get_dotted, get_knob, knob_value, set_dotted, set_knob_value
from engine.jobs import TrainJob

REFERENCE = (
    "find the minimum batch size that still trains arithmetic efficiently (1 to 64), "
    "and whether max response length changes that"
)
APPENDIX_B = (
    "Goal. Find the minimum batch_size that still trains the AIME agent efficiently (batch_size from 1 to 64), "
    "and determine whether max_response_length_in_one_turn influences that value. Max total_training_steps: 60."
)


def test_reference_case_study():
    g = parse_goal(REFERENCE)
    assert g.shape == "minimum"
    assert (g.factor.key, g.factor.low, g.factor.high) == ("swarm.pool.batch_size", 1, 64)
    assert g.secondary is not None and g.secondary.key == "max_tokens"
    assert g.task == "arithmetic"
    assert g.statistic == "auc"  # "efficiently": the whole learning curve counts, not only its end
    assert g.criterion == Criterion()  # no threshold in the sentence: the model's default criterion


def test_appendix_b_verbatim():
    g = parse_goal(APPENDIX_B)
    assert g.shape == "minimum" and g.factor.key == "swarm.pool.batch_size"
    assert (g.factor.low, g.factor.high) == (1, 64)
    assert g.secondary.key == "max_tokens"
    assert g.steps == 60
    assert any("aime" in a for a in g.assumptions)  # the task substitution is said aloud


@pytest.mark.parametrize(
    "text, shape, key",
    [
        ("find the smallest batch size that still trains arithmetic", "minimum", "swarm.pool.batch_size"),
        ("What is the lowest group size that still trains countdown?", "minimum", "swarm.pool.group_size"),
        (
            "how small can the batch size be while still training arithmetic",
            "minimum",
            "swarm.pool.batch_size",
        ),
        (
            "largest learning rate that still trains countdown between 1e-6 and 1e-3",
            "maximum",
            "swarm.training.lr",
        ),
        ("How high can the LoRA rank go and still train calculator", "maximum", "swarm.lora.rank"),
        ("best learning rate for countdown in {1e-5, 3e-5, 1e-4}", "best", "swarm.training.lr"),
        ("tune the sampling temperature for arithmetic", "best", "temperature"),
        ("which group size works best for arithmetic?", "best", "swarm.pool.group_size"),
        ("How does group size affect arithmetic?", "effect", "swarm.pool.group_size"),
        ("what is the effect of max_tokens on countdown", "effect", "max_tokens"),
        ("does the learning rate matter for calculator?", "effect", "swarm.training.lr"),
        ("gspo versus ppo_clip on countdown", "compare", "swarm.algorithm.policy_loss"),
        ("compare grpo and rloo advantages on arithmetic", "compare", "swarm.algorithm.advantage"),
        ("which loss is better for arithmetic, dapo or gspo?", "compare", "swarm.algorithm.policy_loss"),
        ("batch size 8 vs 32 on arithmetic", "compare", "swarm.pool.batch_size"),
        ("arithmetic versus countdown with smollm2-135m", "compare", "task"),
    ],
)
def test_shapes(text, shape, key):
    g = parse_goal(text)
    assert (g.shape, g.factor.key) == (shape, key)


def test_ranges_and_sets():
    assert parse_goal("smallest batch size that trains arithmetic between 2 and 32").factor.low == 2
    assert parse_goal("smallest batch size that trains arithmetic, batch size 4-16").factor.high == 16
    assert parse_goal("best group size for arithmetic among 2, 4 and 8").factor.values == [2, 4, 8]
    assert parse_goal("best lr for countdown in [1e-6, 1e-4]").factor.low == pytest.approx(1e-6)
    g = parse_goal("smallest batch size that trains arithmetic")
    assert (g.factor.low, g.factor.high) == (1, 64)
    assert any("no range given" in a for a in g.assumptions)


def test_numbers_inside_names_are_not_ranges():
    g = parse_goal("effect of group size on arithmetic with smollm2-135m")
    assert g.fixed["swarm.model.name"] == "smollm2-135m"
    assert (g.factor.low, g.factor.high) == (2, 16)  # not 2 to 135 from "smollm2-135m"


def test_fixed_settings_criteria_and_steps():
    g = parse_goal(
        "best learning rate for countdown in {1e-5, 1e-4} with group size 8 using gspo in 30 steps"
    )
    assert g.fixed == {"swarm.pool.group_size": 8, "swarm.algorithm.policy_loss": "gspo"}
    assert g.steps == 30 and g.factor.values == [1e-5, 1e-4]
    assert parse_goal("smallest group size that reaches reward 0.5 on arithmetic").criterion.model_dump() == {
        "kind": "absolute",
        "value": 0.5,
    }
    assert parse_goal(
        "smallest batch size that gets accuracy 40% on arithmetic"
    ).criterion.value == pytest.approx(0.4)
    assert parse_goal(
        "smallest batch size within 5% of the best on arithmetic"
    ).criterion.value == pytest.approx(0.95)


def test_lora_rank_turns_lora_on():
    assert parse_goal("effect of lora rank on arithmetic").fixed["swarm.lora.enabled"] is True


@pytest.mark.parametrize(
    "text, secondary",
    [
        (
            "smallest batch size that trains arithmetic; does the learning rate change it?",
            "swarm.training.lr",
        ),
        (
            "smallest batch size that trains arithmetic and whether it depends on group size",
            "swarm.pool.group_size",
        ),
        ("best lr for countdown, and whether max tokens (16 to 64) changes that", "max_tokens"),
    ],
)
def test_secondary_factor(text, secondary):
    g = parse_goal(text)
    assert g.secondary is not None and g.secondary.key == secondary


def test_secondary_range_is_its_own():
    g = parse_goal(
        "best lr for countdown between 1e-6 and 1e-4, and whether max tokens (16 to 64) changes that"
    )
    assert (g.factor.low, g.factor.high) == (pytest.approx(1e-6), pytest.approx(1e-4))
    assert (g.secondary.low, g.secondary.high) == (16, 64)


@pytest.mark.parametrize(
    "text, problem, understood",
    [
        ("make the model better", "no recognised question", "variables=['model']"),
        ("find the smallest widget count", "names no variable", "nothing usable"),
        ("batch size for arithmetic", "no recognised question", "task=arithmetic"),
        ("find the best batch size between 64 and 1", "low < high", "variable=batch size"),
        ("compare things on arithmetic versus nothing", "'things' is not a variable it knows", "task=arithmetic"),
        ("find the smallest batch size between 2.5 and 8", "whole number", "shape=minimum"),
    ],
)
def test_unparseable_goals_say_what_was_understood(text, problem, understood):
    with pytest.raises(GoalParseError) as info:
        parse_goal(text)
    msg = str(info.value)
    assert problem in msg and understood in msg
    assert "find the smallest <variable>" in msg and "Variables: batch size" in msg  # the forms that work


def test_goal_round_trips_as_data():
    g = parse_goal(REFERENCE)
    assert Goal.model_validate(g.model_dump(mode="json")) == g
    assert "smallest batch size" in g.describe() and "max response length" in g.describe()


def test_knob_lookup_prefers_the_longest_alias():
    ((_, _, knob),) = find_knob("max response length")
    assert knob.key == "max_tokens"
    assert get_knob("lr").key == "swarm.training.lr"
    with pytest.raises(KeyError, match="known: batch size"):
        get_knob("widgets")


@pytest.mark.parametrize("knob", KNOBS, ids=[k.key for k in KNOBS])
def test_every_knob_is_a_train_job_field(knob):
    """Each knob at the ends of its default range (or at each choice) makes a valid TrainJob that reads back
    as the same value: the blueprint sets exactly this key and the analysis reads it back."""
    levels = knob.valid_choices() if knob.kind == "choice" else knob.default_range
    assert levels
    for level in levels:
        value = knob.coerce(level)
        data: dict = {}
        for key, required in knob.requires.items():
            set_dotted(data, key, required)
        set_knob_value(data, knob.key, value)
        job = TrainJob.model_validate(data).model_dump(mode="json")
        for f in knob.fields:  # a clip ratio is both clip ends
            assert get_dotted(job, f) == value and type(get_dotted(job, f)) is type(value)
        assert knob_value(job, knob.key) == value


def test_engine_variables_a_researcher_varies_are_knobs():
    keys = {k.key for k in KNOBS}
    assert {
        "swarm.training.merge",
        "swarm.pool.policy",
        "swarm.lora.enabled",
        "swarm.algorithm.kl_coef",
        "temperature",
        "swarm.training.lr",
        "swarm.pool.batch_size",
        "swarm.pool.group_size",
        "max_tokens",
        "swarm.algorithm.policy_loss",
        "swarm.algorithm.advantage",
        "swarm.lora.rank",
        "swarm.algorithm.clip_low",
        "swarm.algorithm.clip_high",
    } <= keys
    # choices are read from the engine's config classes, not copied
    assert get_knob("merge mode").valid_choices() == ("off", "token", "text")
    assert "nondegenerate_task_count" in get_knob("pool policy").valid_choices()
    assert get_knob("lora").valid_choices() == (False, True)


def test_choice_phrases_coerce_to_engine_values():
    lora = get_knob("swarm.lora.enabled")
    coerced = [lora.coerce(x) for x in ("full weights", "LoRA", "true", 1)]
    assert coerced == [False, True, True, True] and all(type(x) is bool for x in coerced)
    assert get_knob("policy loss").coerce("PPO clip") == "ppo_clip"
    with pytest.raises(ValueError, match="valid: off, token, text"):
        get_knob("merge mode").coerce("both")
