"""Solve-and-check: a two-role arithmetic workflow, the built-in multi-model (non-shared parameters) task.

The `solver` answers "What is a + b?"; the `checker` sees the question and the solver's answer and says
whether it is correct. Rewards: solver 1 when its last integer is the sum; checker 1 when its verdict
("yes"/"no", the first one it says) matches the truth. Each role can be its own model on its own server
(`run_roles`, used by team jobs), or one model can play both (`run`, reward = the mean of the two).
"""

from __future__ import annotations

import re
from typing import Any

from engine.tasks.arithmetic import Arithmetic
from engine.tasks.base import Item

_VERDICT = re.compile(r"\b(yes|no)\b", re.IGNORECASE)

# role -> (an openai.OpenAI client bound to that role's episode, the model name to send)
RoleLLMs = dict[str, tuple[Any, str]]


def verdict(text: str | None) -> bool | None:
    """The checker's first yes/no, or None when it gives neither."""
    m = _VERDICT.search(text or "")
    return None if m is None else m.group(1).lower() == "yes"


class SolveCheck:
    name = "solve_check"
    roles = ("solver", "checker")

    def __init__(self) -> None:
        self._arith = Arithmetic()

    def dataset(self, n: int, seed: int) -> list[Item]:
        return self._arith.dataset(n, seed)

    def run_roles(self, llms: RoleLLMs, item: Item, sampling: dict[str, Any]) -> dict[str, float]:
        """Play the workflow, each role on its own model; returns each role's reward."""
        solver, s_model = llms["solver"]
        checker, c_model = llms["checker"]
        out = solver.chat.completions.create(model=s_model, messages=[{"role": "user", "content": item.prompt}], **sampling)
        answer = out.choices[0].message.content or ""
        solved = Arithmetic.reward(answer, item)
        question = (
            f"Question: {item.prompt}\nProposed answer: {answer.strip()[:200]}\n"
            "Is the proposed answer correct? Reply yes or no."
        )
        out = checker.chat.completions.create(model=c_model, messages=[{"role": "user", "content": question}], **sampling)
        said = verdict(out.choices[0].message.content)
        checked = 1.0 if said is not None and said == (solved == 1.0) else 0.0
        return {"solver": solved, "checker": checked}

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        rewards = self.run_roles({r: (llm, model) for r in self.roles}, item, sampling)
        return sum(rewards.values()) / len(rewards)
