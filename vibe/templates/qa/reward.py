"""Rule reward: 1 when the last integer of the response is the answer.

The *last* integer, because models restate the question ("12 + 7 = 19"); an echo of the prompt ends with
an operand, never with the sum or product, so it scores 0.
"""

from engine.tasks.base import last_integer


def score(task, response):
    return {"correct": 1.0 if last_integer(response) == task["answer"] else 0.0}
