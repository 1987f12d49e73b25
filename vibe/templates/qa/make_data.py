"""Mock dataset: sums and products of two numbers, disjoint train and test prompts."""

import random


def generate(seed):
    rng = random.Random(seed)
    seen, tasks = set(), []
    while len(tasks) < 240:
        a, b, op = rng.randint(2, 60), rng.randint(2, 60), rng.choice("+*")
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        answer = a + b if op == "+" else a * b
        tasks.append({
            "id": f"{a}{op}{b}",
            "prompt": f"What is {a} {op} {b}? Answer with just the number.",
            "gold": str(answer),
            "answer": answer,
        })
    return {"train": tasks[:200], "test": tasks[200:]}
