"""The held-out set: fixed across seeds and arms, distinct items, and never among any seed's training items."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.tasks import get_task
from engine.tasks.base import split_items


@pytest.mark.parametrize("name", ["arithmetic", "countdown", "calculator"])
def test_held_out_is_fixed_distinct_and_disjoint_from_training(name):
    task = get_task(name)
    train0, held0 = split_items(task, 200, 100, seed=0)
    train1, held1 = split_items(task, 200, 100, seed=1)
    assert [it.id for it in held0] == [it.id for it in held1]  # the same problems for every seed
    assert len({it.id for it in held0}) == 100  # distinct: a duplicate would count twice
    for train in (train0, train1):
        assert len(train) == 200 and not {it.id for it in train} & {it.id for it in held0}


def test_training_data_is_the_seed_stream_minus_held_out():
    """Unchanged without a held-out set, so resuming or a job without evaluation draws the same problems;
    and the old arithmetic overlap (2 to 4 of 100 held-out items per seed) is gone."""
    task = get_task("arithmetic")
    assert [it.id for it in split_items(task, 64, 0, seed=3)[0]] == [it.id for it in task.dataset(64, 3)]
    train, held = split_items(task, 64, 100, seed=3)
    stream = [it for it in task.dataset(200, 3) if it.id not in {h.id for h in held}][:64]
    assert [it.id for it in train] == [it.id for it in stream]


def test_a_held_out_set_larger_than_the_task_says_so():
    from engine.tasks.arithmetic import Arithmetic

    with pytest.raises(ConfigError, match="fewer than 30 distinct problems"):
        split_items(Arithmetic(low=1, high=5), 10, 30, seed=0)  # only 25 distinct sums exist
