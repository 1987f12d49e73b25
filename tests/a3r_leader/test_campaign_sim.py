"""Whole simulated campaigns through the leader's real loop (`campaign_sim`), with known truth and the noise
of the committed SmolLM2 runs, and the planted defects they catch.

Pass thresholds carry binomial slack for the finite number of campaigns, derived, not tuned: with N
campaigns a rate whose truth is p is observed below p - 2.33 sqrt(p (1 - p) / N) with probability about
1% (one-sided normal approximation). So a power check passes when the observed share of correct conclusive
answers is at least 0.8 - 2.33 sqrt(0.16 / N), and an error check when the share of wrong answers is at
most alpha + 2.33 sqrt(alpha (1 - alpha) / N). Every check uses a fixed generator seed, so it is
deterministic; the slack only says how far a design that truly meets 80% / alpha can land by chance.

Each check is a plain function returning (ok, observed, threshold) so the mutation tests can run the same
check under a planted defect and assert that it fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from scipy import special

import a3r.analysis.evidence as evidence
import a3r.analysis.stats as stats
import a3r.leader.calibration as calibration
import a3r.report.data as report_data
from a3r.analysis.evidence import MIN_EFFECT
from a3r.leader.design import ResearchBudget
from a3r.leader.goals import Factor, Goal

from .campaign_sim import EFFECT, REF_GAIN, rates

N = 150  # campaigns per check: about 2 to 5 s each on a loaded 2-core machine
Z = 2.326  # one-sided 1% normal quantile for the binomial slack
ALPHA = 0.05
POWER_FLOOR = 0.8 - Z * math.sqrt(0.8 * 0.2 / N)  # 0.724 at N = 150
ERROR_CEILING = ALPHA + Z * math.sqrt(ALPHA * (1 - ALPHA) / N)  # 0.091 at N = 150
DEFAULT = ResearchBudget()  # the budget `a3r research` runs with unless told otherwise
# the same question answered without a confirmation or calibration: 3 seeds per arm, 3 more per stage while
# tied, up to 4 pooled looks, stopping at the first conclusive one; alpha split over them (Bonferroni)
POOLED = ResearchBudget(confirm=False, calibrate=False, min_stages=1, max_stages=4)
# a one-stage campaign (as `make demo` runs): one look of 3 seeds per arm after the calibration
ONE_STAGE = ResearchBudget(max_stages=1, min_stages=1, seeds=3, max_seeds=3)

LR3 = [3e-6, 1.5e-5, 6e-5]  # the reference (usual lr 1e-5's nearest) is 1.5e-5
LR2 = [1e-5, 3e-5]  # the reference is 1e-5


def _goal(shape: str, values: list[Any] | None = None, **factor: Any) -> Goal:
    key = factor.pop("key", "swarm.training.lr")
    return Goal(text=f"simulated {shape}", shape=shape, factor=Factor(key=key, values=values, **factor))


BS_RANGE = {"key": "swarm.pool.batch_size", "low": 1, "high": 64}  # grid 1, 3, 8, 23, 64; reference 64


def _better(x_best: Any) -> Callable[[Any], float]:
    """Every arm gains the reference's gain; `x_best` gains the calibrated minimum effect more."""
    return lambda x: REF_GAIN + (EFFECT if x == x_best else 0.0)


def _tie(x: Any) -> float:
    return REF_GAIN


def _step_at(x0: Any) -> Callable[[Any], float]:
    """Below x0 nothing trains; from x0 on every arm gains the reference's gain. The value just below x0
    misses the "fails" margin (half the reference gain) by exactly the calibrated minimum effect."""
    return lambda x: REF_GAIN if x >= x0 else 0.0


def _margin_below(x0: Any, x_margin: Any) -> Callable[[Any], float]:
    """From x0 on every arm gains the reference's gain; `x_margin` gains exactly MIN_EFFECT of it (on the
    "fails" margin: it trains, but no more than the smallest effect worth reporting); the rest nothing."""
    return lambda x: REF_GAIN if x >= x0 else MIN_EFFECT * REF_GAIN if x == x_margin else 0.0


# -- checks -------------------------------------------------------------------------------------------------
def power_check(goal: Goal, gain, truth: Any, budget: ResearchBudget = DEFAULT, seed: int = 1):
    right, _wrong, _runs = rates(goal, budget, gain, truth, N, seed)
    return right >= POWER_FLOOR, right, POWER_FLOOR


def error_check(goal: Goal, gain, truth: Any, budget: ResearchBudget = DEFAULT, seed: int = 2, rho: float = 0.0):
    _right, wrong, _runs = rates(goal, budget, gain, truth, N, seed, rho)
    return wrong <= ERROR_CEILING, wrong, ERROR_CEILING


RHO = 0.6  # correlation of two arms' runs that share a seed (positive: they share task order and sampling)
PAIRING_GAIN = 0.04  # the least gain in correct answers pairing must buy at RHO in the check below


def pairing_check(seed: int = 1):
    """Correct conclusive answers of a 2-value compare at the calibrated effect with runs of the same seed
    correlated by RHO, analysed with pairing allowed against the same campaigns with it off. The campaigns
    are identical up to the confirmation's interval (same generator seed, and the design never depends on
    pairing), so the difference is pairing's alone."""
    goal, gain = _goal("compare", LR2), _better(3e-5)
    paired, _w, _r = rates(goal, DEFAULT, gain, 3e-5, N, seed, RHO)
    unpaired, _w, _r = rates(goal, DEFAULT.model_copy(update={"pair_seeds": False}), gain, 3e-5, N, seed, RHO)
    return paired - unpaired >= PAIRING_GAIN, paired - unpaired, PAIRING_GAIN


POWER = {
    "best of 3": lambda: power_check(_goal("best", LR3), _better(6e-5), 6e-5),
    "best of 2": lambda: power_check(_goal("best", LR2), _better(3e-5), 3e-5),
    "compare 2": lambda: power_check(_goal("compare", LR2), _better(3e-5), 3e-5),
    "compare 3 (read as best)": lambda: power_check(_goal("compare", LR3), _better(3e-6), 3e-6),
    "minimum over a range": lambda: power_check(_goal("minimum", **BS_RANGE), _step_at(8), 8),
    # issue 25: the reference (1e-5) does not train, the other value does; the reference's pilot alone
    # cannot show it, so the campaign must pilot the other value before giving up
    "compare 2, the reference does not train": lambda: power_check(
        _goal("compare", LR2), lambda x: REF_GAIN if x == 3e-5 else 0.0, 3e-5
    ),
}

ERRORS = {
    # two tied leaders and a worse arm: the worst case for naming a best (either leader named is wrong)
    "best of 3, two tied leaders": lambda: error_check(
        _goal("best", LR3), lambda x: REF_GAIN + (EFFECT if x != 1.5e-5 else 0.0), None
    ),
    "best of 3, all tied": lambda: error_check(_goal("best", LR3), _tie, None),
    "compare 2, tied": lambda: error_check(_goal("compare", LR2), _tie, None),
    # every value trains, so the smallest tested (1) is the answer; any other conclusive answer is wrong
    "minimum, all train": lambda: error_check(_goal("minimum", **BS_RANGE), _tie, 1),
    # below the step at 8 batch size 3 keeps exactly half the reference gain (the "fails" margin) and 1
    # nothing: 3 still trains, so it is the answer; naming 8 needs 3 shown short of the margin it sits on
    "minimum, the value below the step sits on the fails margin": lambda: error_check(
        _goal("minimum", **BS_RANGE), _margin_below(8, 3), 3
    ),
    # no arm trains; a high learning rate destroys what the model knew: "better" than it is not "trains"
    "compare 2, neither trains": lambda: error_check(
        _goal("compare", LR2), lambda x: -0.2 if x == 3e-5 else 0.0, None
    ),
    # runs of the same seed correlated: the confirmation may be analysed paired on seeds
    "compare 2, tied, seeds correlated": lambda: error_check(_goal("compare", LR2), _tie, None, rho=RHO),
    "best of 3, two tied leaders, seeds correlated": lambda: error_check(
        _goal("best", LR3), lambda x: REF_GAIN + (EFFECT if x != 1.5e-5 else 0.0), None, rho=RHO
    ),
    "compare 2 pooled over 4 looks, tied": lambda: error_check(_goal("compare", LR2), _tie, None, POOLED),
    "compare 2 in one stage of 3 seeds, tied": lambda: error_check(
        _goal("compare", LR2), _tie, None, ONE_STAGE
    ),
}


@pytest.mark.parametrize("name", list(POWER))
def test_a_true_effect_of_the_calibrated_size_is_found(name):
    ok, observed, floor = POWER[name]()
    assert ok, f"{name}: correct conclusive answers in {observed:.3f} of {N} campaigns, need >= {floor:.3f}"


@pytest.mark.parametrize("name", list(ERRORS))
def test_wrong_answers_stay_below_alpha(name):
    ok, observed, ceiling = ERRORS[name]()
    assert ok, f"{name}: wrong answers in {observed:.3f} of {N} campaigns, allowed <= {ceiling:.3f}"


def test_pairing_on_seeds_finds_more_when_seeds_correlate():
    ok, gained, least = pairing_check()
    assert ok, f"pairing raised correct answers by {gained:.3f} at rho {RHO}, need >= {least:.3f}"


# -- planted defects ----------------------------------------------------------------------------------------
@contextmanager
def _no_multiplicity_correction(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """Every look decides at 1 - alpha and the answer is read from whatever the last look pooled: no split
    of alpha over looks, no confirmation on fresh seeds."""
    mp.setattr(ResearchBudget, "looks", property(lambda self: 1))
    real = report_data.analyse
    mp.setattr(report_data, "analyse", lambda q, obs, **_kw: real(q, obs))
    yield


@contextmanager
def _normal_quantile(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """The normal quantile in place of Student's t in every interval and power calculation."""
    mp.setattr(stats, "t_quantile", lambda p, df: special.ndtri(p) + 0 * df)
    yield


@contextmanager
def _no_must_train(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """Any arm counts as training (and so may be named), and every calibration shows training."""
    mp.setattr(evidence, "shows_training", lambda gain: True)
    mp.setattr(calibration, "shows_training", lambda gain: True)
    yield


@contextmanager
def _fails_from_the_point_estimate(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """A threshold's tests against the criterion and the "fails" margin read from the point estimate of the
    difference, with no interval: an arm fails whenever its mean gain is below the margin."""
    real = evidence._versus_reference

    def point(*args: Any, **kw: Any) -> stats.Interval:
        iv = real(*args, **kw)
        return stats.Interval(iv.mean, iv.mean, iv.mean, iv.n, iv.level)

    mp.setattr(evidence, "_versus_reference", point)
    yield


@contextmanager
def _pairing_never_used(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """The pairing check always answers "unpaired"."""
    mp.setattr(evidence, "pairing_check", lambda explored, n, level: None)
    yield


@contextmanager
def _reference_speaks_for_all(mp: pytest.MonkeyPatch) -> Iterator[None]:
    """A pilot of the reference that shows no training is never followed by a pilot of the other values
    (the leader before issue 25: it re-piloted the reference alone with more steps, then gave up)."""
    mp.setattr(calibration, "pilot_others", lambda *a, **kw: None)
    yield


# each planted defect and the checks that must catch it (every check above catches at least one defect)
CAUGHT_BY = {
    "no multiplicity correction": (
        _no_multiplicity_correction,
        ["compare 2 pooled over 4 looks, tied"],
    ),
    "normal quantile": (_normal_quantile, ["compare 2 in one stage of 3 seeds, tied"]),
    "no must-train": (_no_must_train, ["compare 2, neither trains"]),
    "pairing never used": (_pairing_never_used, ["pairing gain"]),
    "the reference's pilot speaks for every value": (
        _reference_speaks_for_all,
        ["compare 2, the reference does not train"],
    ),
    "threshold fails from the point estimate": (
        _fails_from_the_point_estimate,
        ["minimum, the value below the step sits on the fails margin"],
    ),
}


@pytest.mark.parametrize(("defect", "check"), [(d, c) for d, (_m, cs) in CAUGHT_BY.items() for c in cs])
def test_each_planted_defect_is_caught(defect, check, monkeypatch):
    plant, _checks = CAUGHT_BY[defect]
    checks = {**POWER, **ERRORS, "pairing gain": pairing_check}
    with plant(monkeypatch):
        ok, observed, bound = checks[check]()
    assert not ok, f"{check} still passes with the defect {defect!r} planted ({observed:.3f} vs {bound:.3f})"
