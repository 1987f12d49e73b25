"""Mock dataset: a * b + c problems that are easier with a calculator."""

import random


def generate(seed):
    rng = random.Random(seed)
    seen, tasks = set(), []
    while len(tasks) < 240:
        a, b, c = rng.randint(10, 99), rng.randint(2, 19), rng.randint(1, 99)
        if (a, b, c) in seen:
            continue
        seen.add((a, b, c))
        answer = a * b + c
        tasks.append({
            "id": f"{a}*{b}+{c}",
            "prompt": f"What is {a} * {b} + {c}? Use the calculator tool, then answer with the number.",
            "gold": f"The result is {answer}",
            "answer": answer,
        })
    return {"train": tasks[:200], "test": tasks[200:]}
