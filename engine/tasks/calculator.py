"""A multi-turn tool-using agent: it may call `calculator(expression)` through OpenAI tool_calls, sees the
results as tool messages, and must finish with the number. Reward 1 when the final answer is right.

Every turn is a separate LLM call of the same episode, so the episode's timelines share prefixes: this is
the workload timeline merging exists for.
"""

from __future__ import annotations

import json
import random
from typing import Any

from engine.tasks.base import Item, last_integer
from engine.tasks.countdown import safe_eval

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an integer arithmetic expression with + - * and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. (12 + 7) * 3"}},
                "required": ["expression"],
            },
        },
    }
]


class CalculatorAgent:
    name = "calculator"

    def __init__(self, max_turns: int = 4) -> None:
        self.max_turns = max_turns

    def dataset(self, n: int, seed: int) -> list[Item]:
        rng = random.Random(seed)
        items = []
        for _ in range(n):
            a, b, c = rng.randint(10, 99), rng.randint(2, 19), rng.randint(1, 99)
            items.append(Item(f"{a}*{b}+{c}", f"What is {a} * {b} + {c}? Use the calculator tool, then answer with the number.", a * b + c))
        return items

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        messages: list[dict[str, Any]] = [{"role": "user", "content": item.prompt}]
        for _ in range(self.max_turns):
            out = llm.chat.completions.create(model=model, messages=messages, tools=TOOLS, **sampling)
            msg = out.choices[0].message
            if not msg.tool_calls:
                return 1.0 if last_integer(msg.content) == item.answer else 0.0
            messages.append(
                {
                    "role": "assistant",
                    "content": msg.content or "",
                    "tool_calls": [tc.model_dump() for tc in msg.tool_calls],
                }
            )
            messages.extend(tool_messages(msg))
        return 0.0


def tool_messages(msg: Any) -> list[dict[str, Any]]:
    """The `tool` messages answering an assistant message's calculator tool calls ("error" when invalid)."""
    results = []
    for tc in msg.tool_calls:
        try:
            expr = json.loads(tc.function.arguments).get("expression", "")
        except (json.JSONDecodeError, AttributeError):
            expr = ""
        value = safe_eval(str(expr))
        results.append({"role": "tool", "tool_call_id": tc.id, "content": "error" if value is None else str(value)})
    return results
