"""column_arithmetic: two-digit additions and subtractions whose reference answer shows the column work."""

from __future__ import annotations

import pytest

from engine.tasks import get_task
from engine.tasks.arithmetic import worked_steps


def test_worked_steps_by_hand():
    assert worked_steps(47, "+", 38) == "Ones: 7 + 8 = 15, write 5 carry 1. Tens: 4 + 3 + 1 = 8. Answer: 85"
    assert worked_steps(27, "+", 82) == "Ones: 7 + 2 = 9, write 9. Tens: 2 + 8 = 10. Answer: 109"
    assert worked_steps(42, "-", 25) == "Ones: 12 - 5 = 7, borrow 1. Tens: 4 - 2 - 1 = 1. Answer: 17"
    assert worked_steps(36, "-", 22) == "Ones: 6 - 2 = 4. Tens: 3 - 2 = 1. Answer: 14"
    with pytest.raises(ValueError, match="a >= b"):
        worked_steps(22, "-", 36)


def test_every_item_is_rewarded_for_its_own_working_and_not_for_another_answer():
    task = get_task("column_arithmetic")
    items = task.dataset(200, 3)
    assert {it.prompt.split()[3] for it in items} == {"+", "-"} and all(it.answer >= 0 for it in items)
    assert all(task.reward(it.extra["worked"], it) == 1.0 for it in items)
    assert all(task.reward(it.extra["worked"] + " or 1000", it) == 0.0 for it in items)  # the last integer counts
    assert [it.id for it in task.dataset(50, 3)] == [it.id for it in items[:50]]  # a seed fixes the stream
