"""Pure helpers of benchmarks/spy_game.py's evaluation: the questions asked (the game's own, one unit per
word, the same for every model), per-word means, and the paired t interval over words."""

from __future__ import annotations

import pytest
from tests_support import load_benchmark

from vibe.templates.game.make_data import generate

sg = load_benchmark("spy_game")


def test_eval_items_ask_each_word_as_a_first_speaker_the_same_way_for_every_model():
    data = generate(0)
    train, test = sg.eval_items(data["train"], "train", 3), sg.eval_items(data["test"], "test", 3)
    words = {i["word"] for i in train}
    assert len(words) == 9 and len(train) == 27  # the 4- and 5-player tasks of a word are one unit
    assert words.isdisjoint({i["word"] for i in test}) and len(test) == 9
    assert all(f"Your secret word is '{i['word']}'" in i["prompt"] and "(nothing yet)" in i["prompt"] for i in train)
    assert all(i["task"]["decoys"] == [] for i in train)  # a first speaker has nobody to copy
    assert len({i["prompt"] for i in train}) > 20  # fresh names and ids per question
    assert sg.eval_items(data["train"], "train", 3) == train  # paired: every model gets these questions


def test_per_word_means_and_the_paired_interval_by_hand():
    rows = [{"word": "a", "score": 1.0}, {"word": "a", "score": 0.0}, {"word": "b", "score": 0.5}]
    assert sg.per_word(rows) == {"a": 0.5, "b": 0.5}
    d = sg.paired({"a": 0.3, "b": 0.5, "c": 0.4, "x": 9.0}, {"a": 0.2, "b": 0.2, "c": 0.2})
    half = 4.302652729911275 * 0.1 / 3**0.5  # t(0.975, 2) * sd of (0.1, 0.3, 0.2) / sqrt(3)
    assert d["n"] == 3 and (d["mean"], d["lo"], d["hi"]) == pytest.approx((0.2, 0.2 - half, 0.2 + half))


def test_the_trainer_plays_the_same_tasks_again_after_n_over_gcd_steps():
    assert sg.task_period(18, 2) == 9 and sg.task_period(18, 4) == 9 and sg.task_period(7, 2) == 7
    n, batch = 18, 4  # the trainer's draw: step s plays tasks (s*B + k) % n
    draw = [sorted((s * batch + k) % n for k in range(batch)) for s in range(30)]
    assert all(draw[s] == draw[s + sg.task_period(n, batch)] for s in range(30 - sg.task_period(n, batch)))


def test_same_tasks_later_pairs_each_step_with_its_repeat_and_skips_replayed_rows():
    def row(step, d, **kw):
        return {"step": step, "components": {"describe": {"mean": d}}, **kw}

    rewards = [row(1, 0.1), row(2, 0.2), row(3, 0.0, replayed=True), row(4, 0.4), row(5, 0.3), row(6, 0.9)]
    got = sg.same_tasks_later(rewards, 3)
    assert got["pairs"] == [(1, 4), (2, 5)]  # step 3 was replayed: (3, 6) is no pair
    half = 12.706204736174707 * 0.14142135623730953 / 2**0.5  # t(0.975, 1) * sd of (0.3, 0.1) / sqrt(2)
    assert (got["mean"], got["lo"], got["hi"]) == pytest.approx((0.2, 0.2 - half, 0.2 + half))
    assert (got["earlier"], got["later"]) == pytest.approx((0.15, 0.35))
    assert sg.same_tasks_later(rewards, 5) is None  # a single pair (1, 6) has no interval
