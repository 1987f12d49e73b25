"""The built-in tasks by name. It sits above the task modules (they import `engine.tasks.base`, never this), so
adding a task is one import and one entry here."""

from __future__ import annotations

from engine.errors import ConfigError
from engine.tasks.arithmetic import Arithmetic, WorkedArithmetic
from engine.tasks.base import Task
from engine.tasks.calculator import CalculatorAgent
from engine.tasks.countdown import Countdown
from engine.tasks.solve_check import SolveCheck
from engine.tasks.summary import Summary
from engine.tasks.werewolf import Werewolf


def _registry() -> dict[str, Task]:
    tasks = (Arithmetic(), Arithmetic(ops="+-", name="arithmetic_pm"), WorkedArithmetic(), Countdown(), CalculatorAgent(), SolveCheck(), Summary(), Werewolf())
    return {t.name: t for t in tasks}


def task_names() -> tuple[str, ...]:
    """The built-in task names, sorted."""
    return tuple(sorted(_registry()))


def get_task(name: str) -> Task:
    """The built-in task `name`; a ConfigError naming the built-ins when there is none."""
    tasks = _registry()
    if name not in tasks:
        raise ConfigError(f"unknown task {name!r}; built-in tasks: {', '.join(sorted(tasks))}")
    return tasks[name]
