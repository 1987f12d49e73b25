"""Single-turn arithmetic: "What is 23 + 41?" with reward 1 when the last integer of the reply is right.

Built-ins: `arithmetic` (additions) and `arithmetic_pm` (additions and subtractions, the toy task of the
HACPO reproduction, where two agents are each taught one operation).
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
