"""Rule reward of the final answer: 1 when its last integer is the result (client.py adds a small
`tool_use` bonus for episodes that called the tool)."""

from engine.tasks.base import last_integer


def score(task, response):
    return {"correct": 1.0 if last_integer(response) == task["answer"] else 0.0}
