"""Pure helpers of benchmarks/hacpo_toy.py: paired t interval, reuse of finished runs, the ordering (ties stay ties), and the job each method runs (same seed, same agents, only the method differs)."""

from __future__ import annotations

import argparse
import json
import math

import pytest
from tests_support import load_benchmark

ht = load_benchmark("hacpo_toy")


def test_paired_t_interval_is_the_textbook_one_and_undefined_for_equal_pairs():
    mean, lo, hi = ht.paired_t([0.1, 0.2, 0.3, 0.0, 0.4])
    half = 2.7764451051977987 * 0.15811388300841897 / 5**0.5  # t(0.975, 4) * sd / sqrt(5)
    assert (mean, lo, hi) == pytest.approx((0.2, 0.2 - half, 0.2 + half))
    mean, lo, hi = ht.paired_t([0.25] * 3)  # no spread and no known noise: no false certainty
    assert mean == 0.25 and (lo, hi) == (-math.inf, math.inf)


def test_a_finished_run_is_reused_only_for_the_same_job(tmp_path):
    args = argparse.Namespace(eval_size=4, max_tokens=8, batch=2, group=2, steps=1, mini_batch=4, eps_low=3e-3, eps_high=4e-3, normalization="char")
    agents = {"smol": {"model": {"name": "tiny"}}, "bytes": {"model": {"name": "tiny-bytes"}}}
    job = ht.job_for(0, "hacpo", agents, args)
    assert ht.finished(tmp_path, job) is None  # nothing there yet
    (tmp_path / ht.RUN_RECORD).write_text(json.dumps({"job": job.model_dump(mode="json"), "wall_s": None}))
    (tmp_path / "summary.json").write_text("{}")
    assert ht.finished(tmp_path, job) is None  # interrupted before its wall time was written: run again
    (tmp_path / ht.RUN_RECORD).write_text(json.dumps({"job": job.model_dump(mode="json"), "wall_s": 12.5}))
    assert ht.finished(tmp_path, job)["wall_s"] == 12.5
    with pytest.raises(SystemExit, match="another job"):
        ht.finished(tmp_path, ht.job_for(0, "gspo", agents, args))


def test_ordering_writes_ties_as_ties():
    assert ht.ordering({"gspo": 0.5, "hacpo": 0.6, "naive": 0.5}) == "hacpo (0.600) > gspo (0.500) = naive (0.500)"


def test_every_method_runs_the_same_pair_on_the_same_prompts():
    args = argparse.Namespace(eval_size=4, max_tokens=8, batch=2, group=2, steps=1, mini_batch=4, eps_low=3e-3, eps_high=4e-3, normalization="char")
    agents = {"smol": {"model": {"name": "tiny"}}, "bytes": {"model": {"name": "tiny-bytes"}}}
    jobs = {m: ht.job_for(1, m, agents, args) for m in ht.METHODS}
    assert {j.seed for j in jobs.values()} == {1} and {j.task for j in jobs.values()} == {"arithmetic_pm"}
    assert {m: j.team.method.value for m, j in jobs.items()} == {m: m for m in ht.METHODS}
    assert jobs["hacpo"].team.hacpo.eps_low == 3e-3


def test_the_validation_split_is_disjoint_from_the_test_items_and_the_same_every_time():
    test_ids = {it.id for it in ht.split_items(ht.get_task(ht.TASK), 0, 100, 0, ht.HELD_OUT_SEED)[1]}
    val = ht.validation_items(100, test_ids)
    ids = [it.id for it in val]
    assert len(set(ids)) == 100 and not set(ids) & test_ids
    assert ids == [it.id for it in ht.validation_items(100, test_ids)]
    # the draw would have hit test items had they not been skipped: the exclusion is doing work
    assert set(it.id for it in ht.get_task(ht.TASK).dataset(400, ht.VALIDATION_SEED)) & test_ids


def test_the_budget_is_chosen_by_validation_accuracy_and_ties_go_to_fewer_steps():
    table = [{"steps": 150, "lr": 1e-3, "val_accuracy": 0.10}, {"steps": 4000, "lr": 3e-3, "val_accuracy": 0.30},
             {"steps": 2000, "lr": 1e-3, "val_accuracy": 0.30}]
    assert ht.choose_budget(table)["steps"] == 2000
    assert ht.budget("4000:3e-3") == (4000, 3e-3)
    with pytest.raises(argparse.ArgumentTypeError, match="STEPS:LR"):
        ht.budget("4000")
