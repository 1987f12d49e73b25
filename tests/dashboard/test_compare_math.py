"""The comparison math and metric ordering of the dashboard, against hand-computed values."""

from __future__ import annotations

import math
import random

import pytest

from a3r.dashboard.compare import (
    MIN_RUNS_FOR_IMPORTANCE,
    Summary,
    eta_squared,
    importance,
    permutation_p,
    score,
    scores_by_value,
)
from a3r.dashboard.metric_kinds import MetricKind, metric_kind, ordered_metrics
from a3r.dashboard.queries import short_labels, steps_done


def test_score_final_and_area_under_the_curve():
    pts = [(0, 0.0), (4, 0.4), (8, 0.4), (9, None)]
    assert score(pts, Summary.FINAL) == 0.4, "the last logged finite value (a NaN step is skipped)"
    # trapezoids: 4 * 0.2 + 4 * 0.4 = 2.4 over a span of 8
    assert score(pts, Summary.AUC) == pytest.approx(0.3)
    assert score([(3, 0.7)], Summary.AUC) == 0.7 and score([], Summary.FINAL) is None


def test_scores_by_value_t_interval_by_hand():
    groups = scores_by_value(["b", 2, 2, 2, "b"], [5.0, 1.0, 2.0, 3.0, 5.0])
    two, b = groups
    # n=3, mean 2, sd 1: half width t(0.975, 2) / sqrt(3) = 4.302653 / 1.732051
    assert (two["value"], two["n"], two["mean"]) == (2, 3, 2.0)
    assert two["hi"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert (b["value"], b["n"], b["lo"], b["hi"]) == ("b", 2, None, None), "identical scores: no interval"


def test_eta_squared_by_hand():
    # groups a: 1, 3 (mean 2); b: 5, 7 (mean 6); grand mean 4. Total SS = 9+1+1+9 = 20, between = 4*4 = 16
    assert eta_squared(["a", "a", "b", "b"], [1, 3, 5, 7]) == pytest.approx(0.8)
    assert eta_squared(["a", "b"], [1, 1]) is None


def test_permutation_p_catches_a_planted_effect_and_is_calibrated_on_noise():
    rng = random.Random(3)
    labels = [str(i % 3) for i in range(15)]
    planted = [int(lab) + 0.1 * rng.random() for lab in labels]
    assert 1 / 2001 <= permutation_p(labels, planted) < 0.01, "a planted effect is found (p never 0)"
    # on pure noise p is uniform: about 5% of 200 draws fall below 0.05 (binomial sd 3 of an expected 10)
    low = sum(permutation_p(labels, [rng.random() for _ in labels], n=400, seed=i) < 0.05 for i in range(200))
    assert 2 <= low <= 20


def test_importance_needs_enough_runs_and_repeated_values():
    n = MIN_RUNS_FOR_IMPORTANCE
    few = importance({"lr": [1, 2] * ((n - 1) // 2) + [1] * ((n - 1) % 2)}, [0.0] * (n - 1))
    assert not few["available"] and f"needs at least {n}" in few["reason"]
    scores = [float(i % 2) + 0.01 * i for i in range(n)]
    out = importance({"lr": [i % 2 for i in range(n)], "tag": list(range(n))}, scores)
    assert out["available"] and [r["param"] for r in out["rows"]] == ["lr"]
    assert out["skipped"] == ["tag"], "every run its own value: any split explains everything"


def test_metric_kinds_and_order_primary_first():
    assert metric_kind("eval_accuracy/arithmetic") is MetricKind.EVALUATION
    assert metric_kind("step_time_s") is MetricKind.TIMING
    assert metric_kind("peak_memory_mb") is MetricKind.SYSTEM
    assert metric_kind("pg_loss") is MetricKind.TRAINING
    names = ["step_time_s", "pg_loss", "eval_accuracy", "entropy", "reward_mean"]
    order = [m["name"] for m in ordered_metrics(names, "reward_mean")]
    assert order == ["reward_mean", "eval_accuracy", "entropy", "pg_loss", "step_time_s"]


def test_steps_done_never_passes_the_budget_and_short_labels():
    assert steps_done(8, 8, "running") == 8 and steps_done(9, 8, "running") == 8
    assert steps_done(7, 8, "succeeded") == 8 and steps_done(None, 8, "pending") == 0
    assert short_labels(["training.optim.lr", "pool.batch_size", "model.lr"]) == {
        "training.optim.lr": "optim.lr",
        "pool.batch_size": "batch_size",
        "model.lr": "model.lr",
    }
