"""Curve scores, bootstrap intervals and the per-shape decision rules, checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from a3r.analysis import (
    ArmStats,
    Question,
    RunObs,
    analyse,
    best_arm,
    bootstrap_ci,
    compare_arms,
    diff_ci,
    dominated_arms,
    effect_of,
    score_curve,
    summarise_arms,
    threshold,
)
from a3r.analysis.stats import Interval


# -- intervals ------------------------------------------------------------------------------------------
def test_one_seed_gives_no_interval_and_overlaps_everything():
    iv = bootstrap_ci([0.3])
    assert (iv.mean, iv.lo, iv.hi, iv.n) == (0.3, -math.inf, math.inf, 1)
    assert iv.overlaps(Interval(5.0, 4.9, 5.1, 3)) and not iv.defined
    assert iv.as_dict()["lo"] is None  # JSON-safe


def test_constant_scores_give_a_zero_width_interval():
    iv = bootstrap_ci([0.5, 0.5, 0.5])
    assert (iv.lo, iv.hi) == (0.5, 0.5)


def test_two_values_hand_computed():
    # resampled means of [0, 1] are 0, 0.5, 1 with probability 1/4, 1/2, 1/4: both 2.5% tails are the endpoints
    iv = bootstrap_ci([0.0, 1.0], seed=3)
    assert (iv.lo, iv.mean, iv.hi) == (0.0, 0.5, 1.0)


def test_bootstrap_is_seeded_and_close_to_the_normal_interval():
    x = np.random.default_rng(7).normal(1.0, 2.0, size=400)
    a, b = bootstrap_ci(x, seed=1), bootstrap_ci(x, seed=1)
    assert a == b
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))  # ~0.196
    assert a.lo == pytest.approx(x.mean() - half, abs=0.03) and a.hi == pytest.approx(
        x.mean() + half, abs=0.03
    )


def test_diff_interval():
    d = diff_ci([1.0, 1.0, 1.0], [0.0, 0.0])
    assert (d.mean, d.lo, d.hi) == (1.0, 1.0, 1.0)
    assert not diff_ci([1.0], [0.0, 0.0]).defined
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([0.1, float("nan")])


# -- curves ---------------------------------------------------------------------------------------------
def test_curve_scores_hand_computed():
    s = score_curve([(4, 1.0), (1, 0.0), (2, 1.0), (3, 1.0)])  # order does not matter
    # k = round(0.25 * 4) = 1; trapezoids 0.5 + 1 + 1 = 2.5 over a span of 3 steps
    assert (s.initial, s.final, s.n_points, s.first_step, s.last_step) == (0.0, 1.0, 4, 1, 4)
    assert s.auc == pytest.approx(2.5 / 3)
    assert not s.diverged


def test_nan_steps_are_dropped_and_flagged():
    s = score_curve([(1, 0.2), (2, None), (3, 0.4)])
    assert s.diverged and s.auc == pytest.approx(0.3) and s.final == 0.4
    assert score_curve([(1, None)]) is None and score_curve([]) is None
    assert score_curve([(5, 0.7)]).auc == 0.7


def test_tail_fraction_averages_the_last_steps():
    s = score_curve([(i, float(i)) for i in range(1, 9)], tail_fraction=0.25)  # k = 2
    assert (s.initial, s.final) == (1.5, 7.5)


# -- arms -----------------------------------------------------------------------------------------------
def arm(x, scores, level=None, initial=0.0, label=None):
    iv = bootstrap_ci(scores, seed=0)
    return ArmStats(label or f"x={x}", x, level, iv, tuple(scores), tuple(range(len(scores))), initial)


def flat(run_id, x, value, *, level=None, state="succeeded", seed=0, start=0.0):
    series = ((1, start), (2, value), (3, value), (4, value))
    return RunObs(
        run_id, 1, seed, x, level, f"x={x}" + (f",l={level}" if level is not None else ""), state, series
    )


def test_summarise_groups_by_level_and_value_and_skips_failed_runs():
    obs = [flat(1, 4, 0.5), flat(2, 4, 0.7, seed=1), flat(3, 4, 0.0, state="failed", seed=2), flat(4, 8, 0.9)]
    arms = summarise_arms(obs, "final")
    assert [a.x for a in arms] == [4, 8]
    a4 = arms[0]
    assert a4.scores == (0.5, 0.7) and a4.run_ids == (1, 2) and a4.excluded == (3,)
    assert a4.interval.mean == pytest.approx(0.6)


Q_MIN = Question(shape="minimum", name="batch size")


def test_threshold_minimum_with_a_confident_bracket():
    arms = [
        arm(1, [0.05, 0.1, 0.15]),
        arm(4, [0.45, 0.5, 0.55]),
        arm(16, [0.8, 0.8, 0.8]),
        arm(64, [0.82, 0.82, 0.82]),
    ]
    th = threshold(arms, Q_MIN)
    assert th.criterion == pytest.approx(0.9 * 0.82)  # floor 0: 90% of the best gain
    assert th.status == {"x=1": "fail", "x=4": "fail", "x=16": "pass", "x=64": "pass"}
    assert th.answer.x == 16 and th.neighbour.x == 4 and th.confident and th.monotone and th.trained
    assert "is 16" in th.verdict and "4, falls short" in th.verdict


def test_threshold_uncertain_neighbour_is_not_confident():
    arms = [arm(4, [0.6, 0.8]), arm(16, [0.82, 0.82])]  # 4's interval [0.6, 0.8] straddles 0.738
    th = threshold(arms, Q_MIN)
    assert th.status["x=4"] == "uncertain" and th.answer.x == 16 and not th.confident


def test_threshold_maximum_mirrors_minimum():
    q = Question(shape="maximum", name="learning rate")
    arms = [arm(1e-6, [0.8, 0.8]), arm(1e-5, [0.82, 0.82]), arm(1e-4, [0.1, 0.1])]
    th = threshold(arms, q)
    assert th.answer.x == 1e-5 and th.neighbour.x == 1e-4 and th.confident


def test_threshold_absolute_and_non_monotone():
    q = Question(shape="minimum", name="batch size", criterion_kind="absolute", criterion_value=0.5)
    arms = [arm(1, [0.1, 0.1]), arm(4, [0.6, 0.6]), arm(16, [0.2, 0.2]), arm(64, [0.7, 0.7])]
    th = threshold(arms, q)
    assert th.criterion == 0.5 and th.answer.x == 4 and not th.monotone and "Not monotone" in th.verdict


def test_nothing_trained_is_said_plainly():
    arms = [arm(1, [0.0, 0.0], initial=0.0), arm(4, [0.0, 0.0], initial=0.0)]
    th = threshold(arms, Q_MIN)
    assert not th.trained and th.answer is None and "Nothing trained" in th.verdict


def test_best_ties_and_dominated():
    q = Question(shape="best", name="lr")
    arms = [arm(1, [0.5, 0.6]), arm(2, [0.55, 0.65]), arm(3, [0.1, 0.1])]
    b = best_arm(arms, q)
    assert b.best.x == 2 and [a.x for a in b.tied] == [1] and [a.x for a in b.dominated] == [3]
    assert not b.separated and "Tied with 1" in b.verdict


def test_compare_winner_and_tie():
    q = Question(shape="compare", name="loss")
    c = compare_arms(arm("gspo", [1.0, 1.0, 1.0]), arm("ppo", [0.0, 0.0]), q)
    assert c.winner.x == "gspo" and (c.diff.lo, c.diff.hi) == (1.0, 1.0)
    t = compare_arms(arm("gspo", [0.0, 1.0]), arm("ppo", [0.0, 1.0]), q)
    assert t.winner is None and "A tie" in t.verdict


def test_effect_direction_and_overlapping_neighbours():
    q = Question(shape="effect", name="group size")
    e = effect_of([arm(16, [0.9, 0.9]), arm(2, [0.1, 0.1]), arm(4, [0.1, 0.2])], q)
    assert (e.low.x, e.high.x, e.direction) == (2, 16, "increases")
    assert e.overlapping_neighbours == (("x=2", "x=4"),)


def test_dominated_arms_keep_at_least_half():
    arms = [arm(1, [0.9, 0.9]), arm(2, [0.1, 0.1]), arm(3, [0.2, 0.2]), arm(4, [0.3, 0.3])]
    assert [a.x for a in dominated_arms(arms)] == [2, 3]  # lowest first, 2 of 4 kept
    assert dominated_arms(arms[:1]) == []


def test_analyse_answers_per_secondary_level():
    q = Question(shape="minimum", name="batch size", secondary_name="max response length")
    obs, rid = [], 0
    # at level 16 only batch size 64 trains; at level 128 already 4 does
    for level, levels in ((16, {4: 0.1, 64: 0.8}), (128, {4: 0.8, 64: 0.82})):
        for x, v in levels.items():
            for seed in range(3):
                rid += 1
                obs.append(flat(rid, x, v + 0.01 * seed, level=level, seed=seed))
    ev = analyse(q, obs)
    assert [le.threshold.answer.x for le in ev.levels] == [64, 4]
    assert ev.secondary_verdict.startswith("Max response length changes the answer")
    assert ev.secondary_effect.mean > 0
    assert "At max response length 16:" in ev.answer


def test_training_not_established_when_the_best_interval_straddles_the_floor():
    arms = [arm(1, [0.05, 0.1], initial=0.1), arm(4, [0.05, 0.2], initial=0.1)]
    th = threshold(arms, Q_MIN)
    assert not th.trained and th.best.x == 4 and "Training is not established" in th.verdict


def test_secondary_verdict_without_any_answer():
    q = Question(shape="minimum", name="batch size", secondary_name="max tokens")
    obs = [flat(i, 4, 0.0, level=lv, seed=i) for i, lv in enumerate((16, 16, 64, 64))]
    assert analyse(q, obs).secondary_verdict.startswith(
        "Whether max tokens changes the answer cannot be told"
    )
