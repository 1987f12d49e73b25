"""Countdown: combine the given numbers with + - * to hit a target. Reward 1 for a correct expression
using each given number at most once, 0.1 for a well-formed but wrong expression, else 0."""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from typing import Any

from engine.tasks.base import Item

_EXPR = re.compile(r"[\d\s+\-*()]+")


def safe_eval(expr: str) -> int | None:
    """Evaluate an integer expression of + - * and parentheses; anything else is rejected."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            if abs(a) > 10**9 or abs(b) > 10**9:
                raise ValueError("too large")
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(node.op)]
        raise ValueError(f"disallowed syntax {type(node).__name__}")

    try:
        return ev(tree)
    except (ValueError, RecursionError):
        return None


class Countdown:
    name = "countdown"

    def dataset(self, n: int, seed: int) -> list[Item]:
        rng = random.Random(seed)
        items = []
        for _ in range(n):
            nums = [rng.randint(1, 12) for _ in range(3)]
            a, b, c = nums
            target = rng.choice([a + b + c, a * b + c, a * b - c, (a + b) * c, a + b - c])
            prompt = (
                f"Using the numbers {nums} (each at most once) and + - * and parentheses, "
                f"write an expression equal to {target}. Answer with the expression only."
            )
            items.append(Item(f"{a},{b},{c}->{target}", prompt, target, {"numbers": nums}))
        return items

    @staticmethod
    def reward(reply: str | None, item: Item) -> float:
        candidates = [m.strip() for m in _EXPR.findall(reply or "") if re.search(r"\d", m)]
        if not candidates:
            return 0.0
        expr = max(candidates, key=len)
        used = Counter(int(x) for x in re.findall(r"\d+", expr))
        if used - Counter(item.extra["numbers"]):
            return 0.0
        value = safe_eval(expr)
        if value is None:
            return 0.0
        return 1.0 if value == item.answer else 0.1

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        out = llm.chat.completions.create(model=model, messages=[{"role": "user", "content": item.prompt}], **sampling)
        return self.reward(out.choices[0].message.content, item)
