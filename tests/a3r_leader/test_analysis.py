"""The analysis: hand-computed intervals, the per-shape rules, and simulated campaigns with known truth.

The simulations run the real `analyse` on synthetic held-out scores (normal seed noise around known arm
gains, quantised to a 64-item evaluation) thousands of times and check the error rates the leader
promises: under ties at most 5% wrong "best"/"smallest" answers, the right answer in at least 80% of
campaigns when a true effect of the calibrated size exists, and no winner when nothing trains.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as st

from a3r.analysis import (
    Question,
    RunObs,
    analyse,
    look_level,
    seeds_for_best,
    seeds_for_effect,
    t_interval,
    welch_interval,
)
from a3r.analysis.curves import score_curve
from a3r.analysis.stats import (
    binomial_sd,
    paired_detectable_effect,
    paired_interval,
    paired_power,
    pairs_for_effect,
    sigma_upper,
    welch_power,
)

M = 64  # held-out items per evaluation
P0 = 0.25  # untrained level


# -- intervals by hand ----------------------------------------------------------------------------------
def test_t_interval_matches_the_textbook_formula():
    iv = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)  # t(0.975, 2) * sd 1 / sqrt(3)
    assert (iv.mean, iv.lo, iv.hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert not t_interval([0.5]).defined  # one seed: no interval at all
    assert not t_interval([0.3, 0.3]).defined  # identical scores and no known noise: no false certainty
    floored = t_interval([0.3, 0.3, 0.3], floor_sd=1 / 64)
    assert floored.defined and floored.hi - floored.lo == pytest.approx(
        2 * 4.302652729911275 / 64 / math.sqrt(3)
    )


def test_two_seeds_give_the_wide_interval_they_deserve():
    """The committed example's 'fail' arm: scores 0.116 and 0.161. A percentile bootstrap said
    [0.116, 0.161]; the t interval with 1 degree of freedom is about [-0.15, 0.42]."""
    iv = t_interval([0.116, 0.161])
    assert iv.lo == pytest.approx(-0.147, abs=0.005) and iv.hi == pytest.approx(0.424, abs=0.005)


def test_welch_interval_agrees_with_scipy():
    a, b = [0.41, 0.47, 0.39, 0.52], [0.30, 0.36, 0.28]
    iv = welch_interval(a, b)
    ref = st.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (iv.lo, iv.hi) == pytest.approx((ref.low, ref.high))
    half = welch_interval(a, b, scale_b=0.5)  # a - 0.5 b: "keeps half of the reference"
    assert half.mean == pytest.approx(np.mean(a) - 0.5 * np.mean(b))


def test_level_spends_alpha_over_looks_and_comparisons():
    assert look_level(0.05, 1) == pytest.approx(0.95)
    assert look_level(0.05, 2) == pytest.approx(0.975)
    assert look_level(0.05, 2, 3) == pytest.approx(1 - 0.05 / 6)
    with pytest.raises(ValueError):
        look_level(0.05, 0)


def test_seed_count_reaches_the_power_it_promises():
    n = seeds_for_effect(0.05, 0.1)
    assert welch_power(0.05, 0.1, n) >= 0.8 > welch_power(0.05, 0.1, n - 1)
    assert n >= math.ceil(15.7 * 0.05**2 / 0.1**2)  # never fewer than the normal-theory rule
    assert binomial_sd(0.0, 64) == pytest.approx(math.sqrt((1 / 64) * (63 / 64) / 64))


def _welch_monte_carlo(sigma, effect, n, nb, level, scale_b=1.0, floor=0.0, sims=100_000):
    """The verdict's own rule, simulated: Welch interval (Satterthwaite df of the sample variances) of
    mean(a) - scale_b mean(b) entirely above 0."""
    rng = np.random.default_rng(0)
    a = rng.normal(effect + scale_b * 0.0, sigma, (sims, n))
    b = rng.normal(0.0, sigma, (sims, nb))
    va = np.maximum(a.var(1, ddof=1), floor**2) / n
    vb = scale_b**2 * np.maximum(b.var(1, ddof=1), floor**2) / nb
    se2 = va + vb
    df = se2**2 / (va**2 / (n - 1) + vb**2 / (nb - 1))
    lo = a.mean(1) - scale_b * b.mean(1) - st.t.ppf(1 - (1 - level) / 2, df) * np.sqrt(se2)
    return float((lo > 0).mean())


@pytest.mark.parametrize(
    ("n", "nb", "effect", "level", "scale_b", "floor"),
    [
        (3, 3, 1.5, 0.95, 1.0, 0.0),
        (6, 6, 1.0, 0.9875, 1.0, 0.0),
        (8, 3, 1.0, 0.95, 1.0, 0.3),
        (5, 5, 1.2, 0.95, 0.5, 0.0),
    ],
)
def test_welch_power_is_the_power_of_the_verdicts_own_rule(n, nb, effect, level, scale_b, floor):
    """The planned power matches a simulation of the Welch rule the verdicts use, within 3 Monte Carlo
    standard errors plus the quadrature's own error (0.001 against an exact-quantile grid)."""
    mc = _welch_monte_carlo(1.0, effect, n, nb, level, scale_b, floor)
    tol = 3 * math.sqrt(mc * (1 - mc) / 100_000) + 0.001
    assert welch_power(1.0, effect, n, n_b=nb, level=level, scale_b=scale_b, floor_sd=floor) == pytest.approx(
        mc, abs=tol
    )


@pytest.mark.parametrize(("n", "effect", "level"), [(3, 2.0, 0.95), (5, 1.0, 0.95), (8, 0.7, 0.99)])
def test_paired_power_is_the_power_of_the_paired_interval(n, effect, level):
    """Simulated: n normal differences, the paired t interval (`paired_interval`'s rule) entirely above 0.
    Within 3 Monte Carlo standard errors; at effect 0 it is the interval's one-sided error, (1 - level) / 2."""
    sims = 100_000
    d = np.random.default_rng(1).normal(effect, 1.0, (sims, n))
    lo = d.mean(1) - st.t.ppf(1 - (1 - level) / 2, n - 1) * d.std(1, ddof=1) / math.sqrt(n)
    mc = float((lo > 0).mean())
    assert paired_power(1.0, effect, n, level=level) == pytest.approx(mc, abs=3 * math.sqrt(mc * (1 - mc) / sims))
    assert paired_power(0.3, 0.0, n, level=level) == pytest.approx((1 - level) / 2, rel=1e-9)
    # the normal-theory shortcut (a z quantile, a known sd) is what this must not be: it overstates at few pairs
    z = st.norm.sf(st.norm.ppf(1 - (1 - level) / 2) - effect * math.sqrt(n))
    assert z > mc + 3 * math.sqrt(mc * (1 - mc) / sims)


def test_pairs_and_detectable_effect_invert_paired_power():
    n = pairs_for_effect(0.02, 0.03)
    assert paired_power(0.02, 0.03, n) >= 0.8 > paired_power(0.02, 0.03, n - 1)
    mde = paired_detectable_effect(0.02, 3)
    assert paired_power(0.02, mde, 3) == pytest.approx(0.8, abs=1e-9)
    assert paired_power(0.02, 0.999 * mde, 3) < 0.8 < paired_power(0.02, 1.001 * mde, 3)
    assert mde == pytest.approx(2 * paired_detectable_effect(0.01, 3))  # the effect scales with sigma


def test_pooled_df_overstates_power_at_three_seeds():
    """The issue's figure: at n = 3 the pooled-df noncentral t claimed 0.46; the Welch rule has about 0.37."""
    effect = 1.99  # the effect (in sd) at which the pooled df 2n - 2 = 4 gives 0.46
    crit = st.t.ppf(0.975, 4)
    pooled = 1 - st.nct.cdf(crit, 4, effect / math.sqrt(2 / 3))
    assert pooled == pytest.approx(0.46, abs=0.01)
    assert welch_power(1.0, effect, 3) == pytest.approx(0.37, abs=0.01)


def test_sigma_is_planned_at_its_upper_confidence_bound():
    # 3 seeds: chi2(2) 20% quantile = -2 ln 0.8 = 0.4463, so the bound is sd * sqrt(2 / 0.4463)
    assert sigma_upper(0.1, 3) == pytest.approx(0.1 * math.sqrt(2 / (-2 * math.log(0.8))))
    assert sigma_upper(0.1, 3) > sigma_upper(0.1, 10) > 0.1


# -- per-shape rules on small hand-made data ------------------------------------------------------------
def runs(arm_gains: dict, *, p0: float = P0, seeds: int = 3, start: int = 0) -> list[RunObs]:
    """Runs whose step-0 score is p0 and whose final score is p0 + the listed gain (one per seed)."""
    out = []
    for x, gains in arm_gains.items():
        for s, g in enumerate(gains if isinstance(gains, list) else [gains] * seeds):
            rid = start + len(out) + 1
            out.append(RunObs(rid, 1, s, x, None, f"bs={x}", "succeeded", ((0, p0), (6, p0 + g))))
    return out


def q(shape: str, **kw) -> Question:
    return Question(shape=shape, name="batch size", eval_items=M, **kw)


def test_an_arm_that_does_not_train_is_never_best():
    # 4 has the highest final score, but its gain interval straddles 0: only 2 trains
    obs = runs({2: [0.10, 0.12, 0.11], 4: [0.30, -0.05, 0.20]})
    ev = analyse(q("best"), obs)
    best = ev.levels[0].best
    assert best.best.x == 2 and not best.separated and not ev.conclusive
    assert "Cannot separate" in ev.answer


def test_nothing_trains_names_no_winner():
    ev = analyse(q("best"), runs({1: [0.0, 0.02, -0.02], 2: [0.01, -0.01, 0.0]}))
    assert ev.nothing_trains and ev.levels[0].best.best is None
    assert ev.answer.startswith("Cannot tell: no tested batch size is shown to train")


def test_nothing_trains_names_what_ran_when_values_were_not_tested():
    """Issue 25: after a pilot of bs=2 alone the report said "no tested batch size is shown to train", which
    reads as "neither 2 nor 8". The verdict names what ran and what did not."""
    one = analyse(q("compare", values=(2, 8)), runs({2: [-0.047, 0.203, 0.234]}))
    assert one.nothing_trains and "no tested" not in one.answer
    assert one.answer.startswith("Cannot tell: bs=2, the only batch size tested, is not shown to train")
    assert one.answer.endswith("Not tested: batch size 8.")
    two = analyse(q("best", values=(1, 2, 4)), runs({1: [0.0, 0.02, -0.02], 2: [0.01, -0.01, 0.0]}))
    assert "no tested" not in two.answer and "Not tested: batch size 4." in two.answer
    assert two.answer.startswith("Cannot tell: none of the batch size values tested (bs=1, bs=2) is shown to train")


def test_fewer_than_min_seeds_gets_no_label():
    ev = analyse(q("minimum"), runs({1: [0.2, 0.21], 4: [0.2, 0.22]}))
    th = ev.levels[0].threshold
    assert set(th.status.values()) == {"uncertain"} and th.answer is None


@pytest.mark.parametrize("shape", ["minimum", "best", "compare"])
def test_one_tested_value_answers_nothing_even_when_it_trains(shape):
    # what a campaign holds when its budget ends after the calibration: only the reference arm, training well
    ev = analyse(q(shape), runs({8: [0.30, 0.33, 0.28]}))
    assert not ev.nothing_trains and not ev.conclusive
    assert ev.answer.startswith("Cannot tell: only batch size 8 was tested")


def test_minimum_with_a_relative_criterion_fixed_by_the_calibration():
    # the reference (4) has calibration runs with gain 0.2; half of it is the criterion
    ref = [
        RunObs(10 + s, 1, s, 4, None, "bs=4", "succeeded", ((0, P0), (6, P0 + g)), calibration=True)
        for s, g in enumerate([0.19, 0.21, 0.20])
    ]
    obs = ref + runs({1: [0.0, 0.01, -0.01], 2: [0.2, 0.18, 0.22]}, start=100)
    th = analyse(q("minimum", criterion_value=0.5), obs).levels[0].threshold
    assert th.criterion.mean == pytest.approx(0.1)
    assert th.status == {"bs=1": "fail", "bs=2": "pass", "bs=4": "pass"}
    assert th.answer.x == 2 and th.neighbour.x == 1 and th.conclusive
    assert "The smallest tested batch size that still trains is 2" in th.verdict


def test_the_paired_interval_is_the_t_interval_of_per_seed_differences():
    a, b = [0.5, 0.6, 0.7, 0.65], [0.4, 0.52, 0.58, 0.55]
    d = [0.1, 0.08, 0.12, 0.1]  # mean 0.1, sd sqrt(0.0008 / 3)
    half = st.t.ppf(0.975, 3) * math.sqrt(0.0008 / 3) / 2
    iv = paired_interval(a, b)
    assert (iv.mean, iv.lo, iv.hi, iv.n) == pytest.approx((0.1, 0.1 - half, 0.1 + half, 4))
    # the same values unpaired: the seed-to-seed spread both arms share stays in, and 0 is inside
    assert welch_interval(a, b).lo < 0 < iv.lo
    assert t_interval(d).hi == pytest.approx(iv.hi)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_interval(a, b[:3])


def _seeded(arm_scores: dict, stage: int = 1, first_seed: int = 0) -> list[RunObs]:
    out = []
    for x, scores in arm_scores.items():
        for i, v in enumerate(scores):
            out.append(
                RunObs(
                    len(out) + 100 * stage,
                    stage,
                    first_seed + i,
                    x,
                    None,
                    f"bs={x}",
                    "succeeded",
                    ((0, P0), (6, v)),
                )
            )
    return out


def test_pairing_is_chosen_from_the_exploration_never_from_the_runs_tested():
    # exploration: seed effects shared by both arms (0, +0.2, -0.2, +0.1): paired differences are tight
    shared = [0.0, 0.2, -0.2, 0.1]
    explored = _seeded(
        {2: [0.5 + e for e in shared], 4: [0.6 + e + 0.01 * (i % 2) for i, e in enumerate(shared)]}
    )
    # confirmation (stage 2, seeds 4..7): the same structure, the difference 0.1 hidden by the seed effects
    fresh = _seeded(
        {2: [0.5 + e for e in shared], 4: [0.6 + e + 0.01 * (i % 2) for i, e in enumerate(shared)]}, 2, 4
    )
    q = Question(shape="compare", name="batch size", eval_items=M, pair_seeds=True)
    ev = analyse(q, explored + fresh, confirm_stage=2)
    assert ev.pairing.use and ev.pairing.sd_paired < ev.pairing.sd_unpaired and ev.pairing.n == 4
    assert ev.levels[0].compare.diff.hi < 0 and ev.levels[0].compare.winner.x == 4 and ev.conclusive
    assert "paired on seeds" in ev.answer
    # without pairing the same runs cannot separate the arms
    plain = analyse(replace(q, pair_seeds=False), explored + fresh, confirm_stage=2)
    assert plain.pairing is None and not plain.conclusive
    # exploration whose seeds share nothing: unpaired, whatever the confirmation's runs look like
    noisy = _seeded({2: [0.5, 0.7, 0.3, 0.6], 4: [0.75, 0.45, 0.7, 0.5]})
    ev2 = analyse(q, noisy + fresh, confirm_stage=2)
    assert not ev2.pairing.use and not ev2.conclusive and "unpaired (Welch)" in ev2.answer


def test_a_gain_shown_above_zero_but_below_the_fails_margin_fails():
    # "still trains" (criterion 0): bs=1 gains 0.06 for sure, but is shown below half of bs=8's 0.4, the
    # smallest effect worth reporting, so it fails (before, being above 0 made it pass and the answer)
    obs = runs({1: [0.05, 0.06, 0.07], 2: [0.4, 0.39, 0.41], 8: [0.4, 0.41, 0.39]})
    th = analyse(q("minimum"), obs).levels[0].threshold
    assert th.tests["bs=1"].lo > 0 and th.status["bs=1"] == "fail"
    assert th.answer.x == 2 and th.neighbour.x == 1 and th.conclusive


def test_absolute_criterion_reads_the_score_not_the_gain():
    th = (
        analyse(
            q("minimum", criterion_kind="absolute", criterion_value=0.4),
            runs({1: [0.05, 0.06, 0.04], 2: [0.3, 0.31, 0.29]}),
        )
        .levels[0]
        .threshold
    )
    assert th.status == {"bs=1": "fail", "bs=2": "pass"} and th.answer.x == 2


def test_compare_needs_a_winner_that_trains():
    ev = analyse(q("compare"), runs({1: [0.0, 0.01, -0.01], 2: [0.2, 0.22, 0.18]}))
    c = ev.levels[0].compare
    assert c.winner.x == 2 and ev.conclusive
    assert c.diff.lo < -0.1  # 1 - 2


def test_untrained_level_carries_the_evaluation_noise():
    ev = analyse(q("best"), runs({2: [0.1, 0.12, 0.11]}))
    u = ev.untrained
    half = st.norm.ppf(0.975) * math.sqrt(P0 * (1 - P0) / M)
    assert (u.mean, u.lo, u.hi) == pytest.approx((P0, P0 - half, P0 + half))


# -- simulated campaigns with known truth --------------------------------------------------------------
SIMS = 1500
SIGMA = 0.05  # seed-to-seed sd of the held-out score, as SmolLM2 on arithmetic measured it


def simulate(shape: str, gains: dict, n: int, rng, *, looks: int = 1, **kw):
    """One campaign's evidence: each arm's final score = p0 + gain + seed noise, quantised to 1/M."""
    obs = []
    for x, g in gains.items():
        for s in range(n):
            end = np.clip(np.round((P0 + g + rng.normal(0, SIGMA)) * M) / M, 0, 1)
            obs.append(RunObs(len(obs) + 1, 1, s, x, None, f"x={x}", "succeeded", ((0, P0), (6, float(end)))))
    return analyse(Question(shape=shape, name="x", eval_items=M, looks=looks, **kw), obs)


def rate(pred, trials: int = SIMS) -> float:
    return sum(bool(pred()) for _ in range(trials)) / trials


@pytest.mark.parametrize("looks", [1, 2])
def test_ties_rarely_name_a_best(looks):
    rng = np.random.default_rng(1)
    tie = {1: 0.15, 2: 0.15, 4: 0.15}
    wrong = rate(lambda: simulate("best", tie, 3, rng, looks=looks).conclusive)
    assert wrong <= 0.05


def test_ties_rarely_name_a_wrong_smallest():
    """Every arm truly keeps the same gain, so the true smallest is 1; naming 2 or 4 as confidently the
    smallest (i.e. failing 1) is the wrong answer."""
    rng = np.random.default_rng(2)
    tie = {1: 0.15, 2: 0.15, 4: 0.15}

    def wrong():
        th = simulate("minimum", tie, 3, rng, criterion_value=0.5).levels[0].threshold
        return th.conclusive and th.answer.x != 1

    assert rate(wrong) <= 0.05


def test_a_true_effect_of_the_calibrated_size_is_found():
    """Best of three where one arm is better by d, with the seeds the calibration asks for."""
    d = 0.1
    n = seeds_for_best(SIGMA, d, 3)  # what the calibration asks for
    rng = np.random.default_rng(3)

    def right():
        ev = simulate("best", {1: 0.1, 2: 0.1, 4: 0.1 + d}, n, rng)
        return ev.conclusive and ev.levels[0].best.best.x == 4

    assert rate(right, 600) >= 0.8


def test_the_smallest_that_trains_is_found_when_it_exists():
    rng = np.random.default_rng(4)
    n = max(3, seeds_for_effect(SIGMA, 0.15))  # the calibration's size for a gain of 0.15

    def right():
        th = simulate("minimum", {1: 0.0, 2: 0.15, 4: 0.15}, n, rng).levels[0].threshold
        return th.answer is not None and th.answer.x == 2

    assert rate(right, 600) >= 0.8


@pytest.mark.parametrize("shape", ["best", "minimum", "compare"])
def test_no_training_never_yields_a_winner(shape):
    rng = np.random.default_rng(5)
    arms = {1: 0.0, 2: 0.0} if shape == "compare" else {1: 0.0, 2: 0.0, 4: 0.0}

    def winner():
        ev = simulate(shape, arms, 3, rng)
        le = ev.levels[0]
        if le.compare is not None:
            return le.compare.winner is not None
        if le.threshold is not None:
            return le.threshold.conclusive
        return le.best.conclusive

    # "trains" is a one-sided test at alpha/2: a winner out of pure noise needs that error at least once
    assert rate(winner) <= 0.025


def test_curve_scores_are_the_first_and_last_evaluation():
    """With 8 evaluation points the untrained level is step 0 alone and the final score the last point:
    averaging quarters would have mixed step 4 into the baseline and step 24 into the final score."""
    curve = [(0, 0.25), (4, 0.4), (8, 0.5), (12, 0.55), (16, 0.6), (20, 0.6), (24, 0.62), (28, 0.66)]
    sc = score_curve(curve)
    assert (sc.initial, sc.final, sc.n_points) == (0.25, 0.66, 8)
    assert score_curve([(0, 0.3), (5, None), (10, 0.5)]).final == 0.5  # NaN steps are dropped
