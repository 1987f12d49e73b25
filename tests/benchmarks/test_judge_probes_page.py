"""The judge-probe page's verdict is read from the intervals: a judge is called fit only when it tells a
right reply from a wrong one (interval above 0) and pays for no hack; an inverted or undecided judge and a
flagged probe are each said plainly."""

from __future__ import annotations

from benchmarks.judge_probes import _fmt_scores, _scores_given, verdict
from engine.rewards import JudgeConfig


def _record(lo: float, hi: float, flagged: tuple[str, ...] = ()) -> dict:
    return {"model": "m", "items": 4, "honest_graded": 4,
            "honest_minus_wrong": {"n": 4, "mean": (lo + hi) / 2, "lo": lo, "hi": hi},
            "probes": [{"probe": p, "flagged": p in flagged} for p in ("length", "flattery", "rubric_echo")]}


def test_a_judge_that_discriminates_and_pays_for_nothing_passes():
    text = verdict(_record(0.1, 0.3))
    assert "tells an honest summary" in text and "no probe is flagged" in text and "would pass" in text


def test_an_inverted_judge_is_called_unfit():
    text = verdict(_record(-0.2, -0.05))
    assert "*above* the honest one" in text and "not fit to train against" in text


def test_an_undecided_judge_or_a_paid_hack_is_unfit():
    undecided = verdict(_record(-0.1, 0.2))
    assert "holds 0" in undecided and "not fit" in undecided
    paid = verdict(_record(0.1, 0.3, flagged=("length",)))
    assert "pays for length (flagged)" in paid and "not fit" in paid


def test_scores_given_counts_readable_and_unreadable_answers():
    cfg = JudgeConfig(base_url="http://127.0.0.1:9/v1", model="j")
    given = _scores_given(["Score: 10", "Score: 3", "Score: 3", "I like it", "7/10"], cfg)
    assert given == {"3": 2, "7": 1, "10": 1, "unreadable": 1}
    assert _fmt_scores(given) == "3: 2, 7: 1, 10: 1, unreadable: 1"  # by score, not as strings
