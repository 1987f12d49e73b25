"""run_cost's slot comparison arithmetic, on hand-made rounds (the --smoke --slots test runs it for real)."""

from __future__ import annotations

import pytest

from benchmarks.run_cost import compare_slots


def _round(variant, layout, k, runs_per_hour):
    return {"variant": variant, "layout": layout, "repeat": k, "runs_per_hour": runs_per_hour}


def test_ratios_pair_rounds_of_the_same_repeat():
    rounds = [
        _round("main", "1x2", 0, 10.0),
        _round("current", "2x1", 0, 25.0),
        _round("current", "1x2", 0, 16.0),
        _round("main", "1x2", 1, 12.0),
        _round("current", "2x1", 1, 24.0),
        _round("current", "1x2", 1, 15.0),
    ]
    out = compare_slots(rounds)
    assert out["median_runs_per_hour"] == {"main 1x2": 11.0, "current 2x1": 24.5, "current 1x2": 15.5}
    assert out["two_slots_over_one"]["values"] == pytest.approx([25 / 16, 24 / 15])
    over = out["over_main_one_slot"]
    assert over["current 2x1"]["values"] == pytest.approx([2.5, 2.0])
    assert over["current 1x2"]["values"] == pytest.approx([1.6, 1.25])
    assert over["current 2x1"]["median"] == pytest.approx(2.25)


def test_without_a_main_baseline_only_the_layouts_are_compared():
    out = compare_slots([_round("current", "1x2", 0, 10.0), _round("current", "2x1", 0, 15.0)])
    assert out["two_slots_over_one"]["values"] == pytest.approx([1.5])
    assert "over_main_one_slot" not in out
