"""Pure parts of `vibe check`: dataset flags, reward probes, dry-run statistics, template matching, config."""

from __future__ import annotations

import math

import pytest

from vibe.config import VibeJob
from vibe.dataset_checks import check_tasks
from vibe.exceptions import LayoutError
from vibe.flags import Report, Severity
from vibe.reward_probes import anti_gold_responses, probe_rewards, prompt_spans
from vibe.stats import component_stats, group_spreads, mean_std
from vibe.templates import Family, match_family


def task(i, prompt=None, **kw):
    return {"id": f"t{i}", "prompt": prompt or f"What is {i} + 100?", "gold": str(i + 100), **kw}


def dataset_codes(train, test, batch=2, group=2):
    r = Report(client="x")
    check_tasks(train, test, batch, group, r)
    return r.codes(Severity.ERROR)


def test_a_clean_dataset_has_no_flags():
    assert dataset_codes([task(1), task(2)], [task(3)]) == set()


def test_empty_ids_are_caught_the_bug_that_made_one_giant_group():
    train = [task(1) | {"id": ""}, task(2) | {"id": " "}, task(3)]
    assert "empty_task_id" in dataset_codes(train, [task(4)])


def test_duplicates_across_splits_too_few_tasks_and_overlap():
    assert "duplicate_task_id" in dataset_codes([task(1), task(2)], [task(9) | {"id": "t1"}])
    assert "too_few_tasks" in dataset_codes([task(1)], [task(2)], batch=4)
    assert "train_test_overlap" in dataset_codes([task(1), task(2)], [task(3, prompt=task(1)["prompt"])])
    # hidden by doubled spaces, case and punctuation: still the same prompt
    assert "train_test_overlap" in dataset_codes([task(1), task(2)], [task(3, prompt="what  is 1 + 100")])
    assert "train_test_overlap" not in dataset_codes([task(1), task(2)], [task(3, prompt="What is 1 + 1000?")])
    assert "train_test_overlap" not in dataset_codes([task(1), task(2)], [task(3, prompt="What is 1 * 100?")])


def test_schema_problems_name_the_field():
    r = Report(client="x")
    check_tasks([{"id": "a", "prompt": "p"}, task(2)], [task(3)], 1, 2, r)
    assert [f.code for f in r.errors] == ["task_missing_fields"] and "gold" in r.errors[0].message
    assert "train_empty" in dataset_codes([], [task(1)])


JOB = VibeJob(name="t", gold_min=0.9, anti_gold_max=0.2).probe_limits()


def last_number_reward(t, response):
    words = response.split()
    return {"correct": 1.0 if words and words[-1] == t["gold"] else 0.0}


def probe_codes(score, tasks=None):
    r = Report(client="x")
    probe_rewards(score, tasks or [task(1), task(2)], JOB, r)
    return r.codes(Severity.ERROR), r


def test_a_sound_reward_passes_every_probe():
    codes, r = probe_codes(last_number_reward)
    assert codes == set() and r.stats["gold_mean"] == 1.0


def test_a_reward_that_pays_for_any_text_is_hackable():
    codes, r = probe_codes(lambda t, resp: {"nonempty": 1.0 if resp.strip() else 0.0})
    assert {"hackable_garbage", "hackable_repeat_prompt"} <= codes
    assert "empty" not in " ".join(codes)


def test_a_reward_that_pays_for_words_of_the_prompt_is_caught_by_the_echo_probe():
    def overlap(t, resp):
        return {"overlap": 1.0 if "What" in resp or resp.strip() == t["gold"] else 0.0}

    assert probe_codes(overlap)[0] == {"hackable_repeat_prompt"}


def test_decoys_are_probed_and_a_raising_reward_is_reported():
    tasks = [task(1, decoys=["the other player said 101"])]
    assert probe_codes(last_number_reward, tasks)[0] == {"hackable_decoy"}
    codes, r = probe_codes(lambda t, resp: {"x": 1.0 / len(resp)})  # raises on the empty reply only
    [flag] = [f for f in r.errors if f.code == "score_raises_intermittently"]
    assert "empty response" in flag.message and "score_raises" not in codes
    calls = 2 * (1 + len(anti_gold_responses(task(1))))  # two tasks, gold and every anti-gold response each
    assert f"raised on 2 of {calls} probe calls" in flag.message and flag.detail["frequency"] == 2 / calls


def test_a_reward_that_raises_on_every_input_is_not_called_intermittent():
    codes, r = probe_codes(lambda t, resp: {"x": 1 / 0})
    assert codes == {"score_raises"} and "every probe call" in r.errors[0].message


@pytest.mark.parametrize(
    ("value", "why"),
    [(float("nan"), "is nan, not a finite"), (float("inf"), "is inf, not a finite"),
     ("1.0", "is '1.0' (str), not a number"), (True, "is True (bool), not a number")],
)
def test_rewards_that_are_not_finite_numbers_are_errors_not_converted(value, why):
    """NaN passed `s > anti_gold_max` (False for NaN) and strings were silently float()ed."""
    codes, r = probe_codes(lambda t, resp: {"c": value if not resp else last_number_reward(t, resp)["correct"]})
    assert codes == {"reward_not_a_number"} and f"component 'c' {why}" in r.errors[0].message
    assert "empty response" in r.errors[0].message  # the first probe call that returned it


def test_a_prompt_that_leaks_its_answer_is_caught_by_the_span_probe():
    """The echo probe repeats the whole prompt, which ends on an operand and scores 0; a span does not."""
    leak = {"id": "m", "prompt": "The answer is 1456. What is 56 * 26?", "gold": "1456"}
    assert prompt_spans(leak["prompt"])[:3] == ["1456", "56", "26"]
    codes, r = probe_codes(last_number_reward, [leak])
    assert codes == {"hackable_prompt_span"} and "for '1456'" in r.errors[0].message
    assert probe_codes(last_number_reward, [task(1)])[0] == set()  # its operands alone score nothing


def test_a_reward_that_misses_the_gold_or_leaves_the_range_is_flagged():
    assert "gold_scores_low" in probe_codes(lambda t, resp: {"c": 0.5})[0]
    assert probe_codes(lambda t, resp: {"c": 3.0})[0] == {"reward_out_of_range"}
    assert probe_codes(lambda t, resp: 1.0)[0] == {"reward_not_a_number"}  # not a component dict


def test_roles_are_split_between_servers_or_the_mistake_named():
    from vibe.play import split_roles

    assert split_roles(["civilian", "spy"], []) == [["civilian", "spy"]]
    assert split_roles(["civilian", "spy", "judge"], ["spy"]) == [["civilian", "judge"], ["spy"]]
    with pytest.raises(ValueError, match="not in client.py's ROLES"):
        split_roles(["civilian"], ["spy"])
    with pytest.raises(ValueError, match="leave at least one"):
        split_roles(["spy"], ["spy"])


def test_stats_against_hand_computed_values():
    assert mean_std([1.0, 3.0]) == (2.0, 1.0)
    eps = [
        {"task_id": "a", "components": {"c": 1.0, "f": 0.5}},
        {"task_id": "a", "components": {"c": 0.0, "f": 0.5}},
        {"task_id": "b", "components": {"c": 0.0, "f": 0.0}},
        {"task_id": "b", "components": {"c": 0.0, "f": 0.0}},
        {"task_id": "b", "error": "boom"},
    ]
    s = component_stats(eps)
    assert s["c"] == {"mean": 0.25, "std": math.sqrt(3 / 16)}
    assert s["f"]["mean"] == 0.25 and s["total"]["mean"] == 0.5
    assert group_spreads(eps) == {"a": 0.5, "b": 0.0}


@pytest.mark.parametrize(
    ("prompt", "family"),
    [
        ("Who is the spy: a game where players describe words and vote", Family.GAME),
        # the AgentJet spy prompt also asks for Tools and a mock dataset: still the game
        ("Write an agent that learns the Who is the Spy task, trained via reinforcement learning. N players, "
         "civilians and spies; rounds of descriptions, then voting. Use the OpenAI SDK, flexibly using Tools.",
         Family.GAME),
        ("An agent that calls a calculator tool over several turns", Family.TOOL_USE),
        ("Answer arithmetic questions", Family.QA),
        ("Summarise legal contracts", None),
        # a family's words without its subject: another task, so no template
        ("Make the model answer yes/no questions about whether a number is prime", None),
        ("Two players play rock-paper-scissors against each other", None),
        ("An agent that calls a weather API tool", None),
    ],
)
def test_template_matching(prompt, family):
    assert match_family(prompt) is family


def test_config_invariants_say_what_to_change(tmp_path):
    with pytest.raises(ValueError, match="anti_gold_max < gold_min"):
        VibeJob(name="t", gold_min=0.1, anti_gold_max=0.5)
    bad = tmp_path / "vibe.yaml"
    bad.write_text("name: t\nswarm: {pool: {batch_size: 0}}\n")
    with pytest.raises(LayoutError, match="vibe.yaml"):
        VibeJob.load(bad)
