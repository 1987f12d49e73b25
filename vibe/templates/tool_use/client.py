"""Multi-turn tool use: the agent may call `calculator(expression)` through OpenAI tool calls, sees each
result as a tool message, and must end with the number. Every turn is a call of the same episode."""

import json

from reward import score

from engine.tasks.calculator import TOOLS
from engine.tasks.countdown import safe_eval

MAX_TURNS = 4


def run(llm, model, task, sampling):
    messages = [{"role": "user", "content": task["prompt"]}]
    used_tool = False
    for _ in range(MAX_TURNS):
        msg = llm.chat.completions.create(model=model, messages=messages, tools=TOOLS, **sampling).choices[0].message
        if not msg.tool_calls:
            return {**score(task, msg.content or ""), "tool_use": 0.1 if used_tool else 0.0}
        used_tool = True
        messages.append({"role": "assistant", "content": msg.content or "",
                         "tool_calls": [tc.model_dump() for tc in msg.tool_calls]})
        for tc in msg.tool_calls:
            try:
                expr = str(json.loads(tc.function.arguments).get("expression", ""))
            except (json.JSONDecodeError, AttributeError):
                expr = ""
            value = safe_eval(expr)
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": "error" if value is None else str(value)})
    return {"correct": 0.0, "tool_use": 0.1 if used_tool else 0.0}
