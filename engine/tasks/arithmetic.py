"""Single-turn arithmetic: "What is 23 + 41?" with reward 1 when the last integer of the reply is right.

Built-ins: `arithmetic` (additions) and `arithmetic_pm` (additions and subtractions, the toy task of the
HACPO reproduction, where two agents are each taught one operation), and `column_arithmetic` (two-digit
additions and subtractions answered column by column: the reference answer is tens of tokens of worked
steps, so HACPO's per-token ratio s = exp(-D/L) of another agent's answer can land in its clip band).
"""

from __future__ import annotations

import random
from typing import Any

from engine.tasks.base import Item, last_integer


class Arithmetic:
    def __init__(self, low: int = 1, high: int = 50, ops: str = "+", name: str = "arithmetic") -> None:
        self.low, self.high, self.ops, self.name = low, high, ops, name

    def dataset(self, n: int, seed: int) -> list[Item]:
        rng = random.Random(seed)
        items = []
        for _ in range(n):
            a, b, op = rng.randint(self.low, self.high), rng.randint(self.low, self.high), rng.choice(self.ops)
            answer = {"+": a + b, "-": a - b, "*": a * b}[op]
            items.append(Item(f"{a}{op}{b}", f"What is {a} {op} {b}? Answer with just the number.", answer))
        return items

    @staticmethod
    def reward(reply: str | None, item: Item) -> float:
        return 1.0 if last_integer(reply) == item.answer else 0.0

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        out = llm.chat.completions.create(model=model, messages=[{"role": "user", "content": item.prompt}], **sampling)
        return self.reward(out.choices[0].message.content, item)


class WorkedArithmetic(Arithmetic):
    """Two-digit a + b or a - b (a >= b for subtractions) whose reference answer shows the column work and
    ends with "Answer: N"; the reward is still the last integer of the reply (`Arithmetic.reward`)."""

    def __init__(self, ops: str = "+-", name: str = "column_arithmetic") -> None:
        super().__init__(low=10, high=99, ops=ops, name=name)

    def dataset(self, n: int, seed: int) -> list[Item]:
        rng = random.Random(seed)
        items = []
        for _ in range(n):
            a, b, op = rng.randint(self.low, self.high), rng.randint(self.low, self.high), rng.choice(self.ops)
            if op == "-" and a < b:
                a, b = b, a
            prompt = f"What is {a} {op} {b}? Work it out column by column, then end with 'Answer: N'."
            answer = a + b if op == "+" else a - b
            items.append(Item(f"{a}{op}{b}w", prompt, answer, {"worked": worked_steps(a, op, b)}))
        return items


def worked_steps(a: int, op: str, b: int) -> str:
    """The column-by-column working of two-digit a + b or a - b (a >= b), e.g. for 47 + 38:
    "Ones: 7 + 8 = 15, write 5 carry 1. Tens: 4 + 3 + 1 = 8. Answer: 85"."""
    (a1, a0), (b1, b0) = divmod(a, 10), divmod(b, 10)
    if op == "+":
        ones = a0 + b0
        carry = ones // 10
        first = f"Ones: {a0} + {b0} = {ones}, write {ones % 10}" + (" carry 1." if carry else ".")
        second = f"Tens: {a1} + {b1}" + (" + 1" if carry else "") + f" = {a1 + b1 + carry}."
        return f"{first} {second} Answer: {a + b}"
    if op == "-":
        if a < b:
            raise ValueError(f"worked subtraction needs a >= b, got {a} - {b}")
        borrow = int(a0 < b0)
        first = f"Ones: {a0 + 10 * borrow} - {b0} = {a0 + 10 * borrow - b0}" + (", borrow 1." if borrow else ".")
        second = f"Tens: {a1} - {b1}" + (" - 1" if borrow else "") + f" = {a1 - b1 - borrow}."
        return f"{first} {second} Answer: {a - b}"
    raise ValueError(f"worked steps cover + and -, not {op!r}")
