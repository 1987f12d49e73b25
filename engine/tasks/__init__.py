"""Built-in tasks: dataset generators, rule rewards and agents that talk to a swarm server over HTTP."""

from engine.tasks.base import Item, Task
from engine.tasks.registry import get_task, task_names

__all__ = ["Item", "Task", "get_task", "task_names"]
