"""Pure helpers of benchmarks/demo_sweep.py: job settings, metrics parsing, the campaign's answer."""

from __future__ import annotations

import json

from tests_support import load_benchmark

ds = load_benchmark("demo_sweep")


def test_flatten_nested_dicts_to_dotted_keys():
    assert ds.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_with_seed_sets_the_top_level_seed_and_leaves_the_job_alone():
    job = {"seed": 0, "swarm": {"model": {"seed": 0}}}
    seeded = ds.with_seed(job, 2)
    assert seeded == {"seed": 2, "swarm": {"model": {"seed": 0}}}
    assert job["seed"] == 0


def test_split_settings_separates_common_non_default_and_varying():
    defaults = {"lr": 1.0, "pool": {"batch_size": 4, "group_size": 4}, "seed": 0}
    jobs = [
        {"lr": 2.0, "pool": {"batch_size": 1, "group_size": 4}, "seed": 0},
        {"lr": 2.0, "pool": {"batch_size": 4, "group_size": 4}, "seed": 1},
    ]
    common, per_job = ds.split_settings(jobs, defaults)
    assert common == {"lr": 2.0}  # group_size is at its default; the seed is left out
    assert per_job == [{"pool.batch_size": 1}, {"pool.batch_size": 4}]


def test_series_reads_one_metric_first_value_per_step_and_skips_bad_lines():
    data = (
        b'{"step": 0, "eval_accuracy": 0.25}\n'
        b'{"step": 1, "reward_mean": 0.5}\n'
        b"not json\n"
        b'{"step": 6, "eval_accuracy": NaN}\n'
        b'{"step": 6, "eval_accuracy": 0.5}\n'
    )
    assert ds.series_from_bytes(data, "eval_accuracy") == ((0, 0.25), (6, None))
    assert ds.series_from_bytes(data, "reward_mean") == ((1, 0.5),)


def test_find_answer_takes_text_and_value_under_answer_keys():
    report = {"title": "x", "evidence": {"answer": "The smallest ...", "levels": [{"answer_x": 2}]}}
    assert ds.find_answer(report) == ("The smallest ...", 2)
    assert ds.find_answer({"verdict": "none"}) == (None, None)


def test_value_in_text_reads_the_threshold_verdict():
    text = "The smallest tested batch size that still trains is 2: gain over the untrained level 0.25 is 0.1."
    assert ds.value_in_text(text) == 2.0
    assert ds.value_in_text("... learning rate that still trains is 3e-05: gain ...") == 3e-05
    assert ds.value_in_text("Cannot tell: no tested batch size is shown to train.") is None


def test_compare_campaign_states_same_or_different_answer(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"answer": "The smallest tested batch size that still trains is 4: ..."}))
    assert ds.compare_campaign(path, 4)["same_answer"] is True
    assert ds.compare_campaign(path, 2)["same_answer"] is False
    path.write_text(json.dumps({"answer": "Cannot tell: no tested batch size is shown to train."}))
    assert ds.compare_campaign(path, None) == {
        "report": str(path),
        "answer_text": "Cannot tell: no tested batch size is shown to train.",
        "answer_value": None,
        "same_answer": True,
    }
