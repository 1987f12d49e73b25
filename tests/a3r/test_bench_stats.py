"""Regression statistics on hand-computed cases and simulated histories.

The change-point detector is judged the way it will be used: a planted step must be found at the commit
that introduced it, and histories of pure noise must raise an alarm no more often than the stated rate.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from a3r.bench.stats import Verdict, compare_metric, detect_change_points, min_effect_abs
from a3r.bench.suite import Direction, MetricKind, MetricSpec, StatTest


def spec(kind=MetricKind.FINAL_REWARD, **kw) -> MetricSpec:
    return MetricSpec(kind=kind, **{"min_effect": 0.1, **kw})


def test_welch_regression_needs_significance_and_min_effect():
    a, b = [0.50, 0.52, 0.48], [0.30, 0.32, 0.28]  # reward dropped by 0.2, sd 0.02 each side
    c = compare_metric(spec(), a, b, alpha=0.05)
    assert c.verdict is Verdict.REGRESSION
    assert c.delta.mean == pytest.approx(-0.2)
    # hand-computed: se = sqrt(0.02^2/3 * 2) = 0.01633, df = 4, t_0.95(4) = 2.1318 -> half width 0.03481
    assert c.delta.hi == pytest.approx(-0.2 + 2.1318 * 0.016330, abs=1e-3)
    assert c.rel_delta == pytest.approx(-0.4)
    assert c.p_worse == pytest.approx(st.ttest_ind(b, a, equal_var=False, alternative="less").pvalue)
    # the same drop with a minimum effect of 0.25 matters to nobody
    assert compare_metric(spec(min_effect=0.25), a, b).verdict is Verdict.NO_CHANGE
    # and a big but noisy drop is not significant
    assert compare_metric(spec(), [0.9, 0.1, 0.5], [0.2, 0.6, 0.1]).verdict is Verdict.NO_CHANGE


def test_direction_decides_what_is_worse():
    slow = spec(MetricKind.SECONDS_PER_STEP, min_effect=0.2, relative=True)
    assert slow.direction is Direction.LOWER
    a, b = [10.0, 10.2, 9.8], [13.0, 13.1, 12.9]  # 30% slower
    assert compare_metric(slow, a, b).verdict is Verdict.REGRESSION
    assert compare_metric(slow, b, a).verdict is Verdict.IMPROVEMENT
    assert min_effect_abs(slow, 10.0) == pytest.approx(2.0)
    # 10% slower is significant but below the 20% minimum effect
    assert compare_metric(slow, a, [11.0, 11.1, 10.9]).verdict is Verdict.NO_CHANGE
    # a higher reward is never a regression, however large
    assert compare_metric(spec(), [0.1, 0.12, 0.11], [0.9, 0.91, 0.92]).verdict is Verdict.IMPROVEMENT


def test_mann_whitney_and_small_samples():
    mw = dict(test=StatTest.MANN_WHITNEY)
    a, b = [0.5, 0.51, 0.52, 0.53], [0.2, 0.21, 0.22, 0.23]
    c = compare_metric(spec(), a, b, **mw)
    # 4 vs 4 perfectly separated: one-sided exact p = 1 / C(8, 4) = 1/70
    assert c.p_worse == pytest.approx(1 / 70)
    assert c.verdict is Verdict.REGRESSION
    # 2 vs 2 can never reach p <= 0.05 with Mann-Whitney (smallest p is 1/6)
    assert compare_metric(spec(), [0.5, 0.6], [0.1, 0.2], **mw).verdict is Verdict.NO_CHANGE
    assert compare_metric(spec(), [0.5], [0.1, 0.2]).verdict is Verdict.INCONCLUSIVE


def test_resolution_floor_lets_identical_seeds_be_compared():
    acc = spec(MetricKind.HELDOUT_ACCURACY, min_effect=0.1, resolution=1 / 32)
    same_a, same_b = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25]
    assert compare_metric(spec(MetricKind.HELDOUT_ACCURACY), same_a, same_b).verdict is Verdict.NO_CHANGE
    assert compare_metric(acc, same_a, same_b).verdict is Verdict.REGRESSION


def _history(rng, n_commits=20, seeds=3, step_at=None, step=0.0, sd=1.0, commit_sd=0.3):
    """Values per commit: a commit-level offset (machine conditions) plus per-seed noise."""
    out = []
    for c in range(n_commits):
        level = (step if step_at is not None and c >= step_at else 0.0) + rng.normal(0, commit_sd)
        out.append(list(level + rng.normal(0, sd, seeds)))
    return out


def test_planted_step_is_found_at_its_commit():
    rng = np.random.default_rng(1)
    hits = 0
    for trial in range(20):
        hist = _history(rng, step_at=12, step=4.0)  # 6 sd of a commit mean
        cps = detect_change_points(hist, alpha=0.05, min_effect=1.0, seed=trial)
        hits += [cp.index for cp in cps] == [12]
        if cps:
            assert cps[0].delta > 1.0
    assert hits >= 19, f"planted step at commit 12 found exactly in {hits}/20 histories"


def test_two_steps_are_both_found():
    hist = [[0.0, 0.1, -0.1]] * 6 + [[3.0, 3.1, 2.9]] * 6 + [[1.0, 1.1, 0.9]] * 6
    cps = detect_change_points(hist, alpha=0.05, min_effect=0.5)
    assert [c.index for c in cps] == [6, 12]
    assert cps[0].before == pytest.approx(0.0, abs=1e-9) and cps[0].after == pytest.approx(2.0)


def test_noise_alone_alarms_at_most_at_the_stated_rate():
    """400 histories of pure noise: the alarm count must be consistent with alpha = 0.05
    (binomial(400, 0.05) exceeds 32 with probability < 0.5%)."""
    rng = np.random.default_rng(7)
    alarms = sum(bool(detect_change_points(_history(rng), alpha=0.05, seed=i, n_perm=99)) for i in range(400))
    assert alarms <= 32, f"{alarms}/400 false alarms at alpha 0.05"
    assert alarms >= 5, f"only {alarms}/400 alarms: the test is far more conservative than stated"


def test_min_effect_silences_small_real_steps():
    hist = [[0.0, 0.01, -0.01]] * 8 + [[0.2, 0.21, 0.19]] * 8
    assert [c.index for c in detect_change_points(hist, min_effect=0.1)] == [8]
    assert detect_change_points(hist, min_effect=0.5) == []


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="n_perm"):
        detect_change_points([[1.0], [2.0]], alpha=0.01, n_perm=19)
    with pytest.raises(ValueError, match="at least one value"):
        detect_change_points([[1.0], []])
    with pytest.raises(ValueError, match="alpha"):
        compare_metric(spec(), [1, 2], [1, 2], alpha=0.7)
