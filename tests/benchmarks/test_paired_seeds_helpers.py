"""`benchmarks/paired_seeds.py`: its summary of paired against unpaired, checked against hand values."""

from __future__ import annotations

import math

import pytest
from scipy import stats as st
from tests_support import load_benchmark

ps = load_benchmark("paired_seeds")
correlation_interval, pairing_summary, sd_interval = ps.correlation_interval, ps.pairing_summary, ps.sd_interval


def test_pairing_summary_by_hand():
    # a shared seed effect (0, 0.2, -0.2, 0.1) in both arms, and a difference of 0.1 +- 0.01
    shared = [0.0, 0.2, -0.2, 0.1]
    b = [0.5 + e for e in shared]
    a = [0.6 + e + (0.01 if i % 2 else -0.01) for i, e in enumerate(shared)]
    s = pairing_summary(a, b)
    d = [0.09, 0.11, 0.09, 0.11]  # mean 0.1, sd sqrt(4 * 0.0001 / 3)
    assert s["sd_paired"] == pytest.approx(math.sqrt(0.0004 / 3))
    va = st.tstd(a) ** 2
    vb = st.tstd(b) ** 2
    assert s["sd_unpaired"] == pytest.approx(math.sqrt(va + vb)) and s["pairing_narrower"]
    assert s["r"] > 0.99 and s["r_ci"][0] < s["r"] < s["r_ci"][1]
    half = st.t.ppf(0.975, 3) * st.tstd(d) / 2
    assert s["diff_paired"] == pytest.approx([0.1, 0.1 - half, 0.1 + half])
    assert s["diff_welch"][1] < 0 < s["diff_paired"][1]  # unpaired, the seed effects hide the difference
    with pytest.raises(ValueError, match="n >= 4"):
        pairing_summary(a[:3], b[:3])


def test_intervals_by_hand():
    lo, hi = sd_interval(1.0, 7)
    assert (lo, hi) == pytest.approx((math.sqrt(7 / st.chi2.ppf(0.975, 7)), math.sqrt(7 / st.chi2.ppf(0.025, 7))))
    zlo, zhi = correlation_interval(0.5, 8)
    half = st.norm.ppf(0.975) / math.sqrt(5)
    assert (zlo, zhi) == pytest.approx((math.tanh(math.atanh(0.5) - half), math.tanh(math.atanh(0.5) + half)))
