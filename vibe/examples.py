"""`vibe new "<task>" --examples FILE.jsonl`: a QA client for the task the user's examples define.

FILE has one JSON object per line, `{"prompt": ..., "answer": ...}` (`gold` is accepted for `answer`).
The client is the qa template's single-call `client.py`; what this module writes are the parts that
depend on the examples: `examples.jsonl` (the examples, cleaned), a `make_data.py` that splits them
(seeded shuffle, one in five held out), a `reward.py` that scores with the matcher `pick_matcher` chose
(vibe.answer_match), a README that says what it trains, and `max_tokens` raised to fit the longest answer.

The matcher is the first that fits the answers (all numbers: numeric; a few labels that repeat: choice;
free text with spaces: normalised; otherwise exact) and is then checked on every example: the answer
must match, and an empty reply, garbage, the prompt itself (a leak) and, for choice, every other choice
must not. Examples that fail that check are refused with their line numbers, rather than built into a
client that cannot learn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vibe.answer_match import DESCRIPTIONS, Matcher, is_number, matches, normal_text
from vibe.exceptions import VibeError

__all__ = ["Example", "MIN_EXAMPLES", "check_matcher", "client_files", "pick_matcher", "read_examples"]

MIN_EXAMPLES = 5  # one held out, and four to fill the qa template's batch of 4 tasks
MAX_CHOICES = 8
GARBAGE = "lorem zebra quartz banana orbit"


@dataclass(frozen=True)
class Example:
    line: int
    prompt: str
    answer: str


def read_examples(path: Path) -> list[Example]:
    """The examples of a JSONL file; VibeError naming the line for anything else (bad JSON, a missing or
    empty prompt or answer, a prompt given twice up to case and spacing), or for too few."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise VibeError(f"cannot read --examples {path}: {e.strerror}") from e
    out, seen, problems = [], {}, []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as e:
            problems.append(f"line {n}: not JSON ({e.msg})")
            continue
        answer = row.get("answer", row.get("gold")) if isinstance(row, dict) else None
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        prompt = row.get("prompt") if isinstance(row, dict) else None
        if not (isinstance(prompt, str) and prompt.strip() and isinstance(answer, str) and answer.strip()):
            problems.append(f'line {n}: needs a non-empty "prompt" and "answer" (strings)')
            continue
        key = normal_text(prompt)
        if key in seen:
            problems.append(f"line {n}: the same prompt as line {seen[key]} (up to case and spacing)")
            continue
        seen[key] = n
        out.append(Example(n, prompt.strip(), answer.strip()))
    if problems:
        raise VibeError(f"{path}: " + "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))
    if len(out) < MIN_EXAMPLES:
        raise VibeError(f"{path} has {len(out)} example(s); give at least {MIN_EXAMPLES} (one is held out for testing, "
                        "four fill a training step), one JSON object per line: {\"prompt\": ..., \"answer\": ...}")
    return out


def pick_matcher(examples: list[Example]) -> tuple[Matcher, list[str]]:
    """The matcher the answers call for, and the choices (for CHOICE; else [])."""
    answers = [e.answer for e in examples]
    if all(is_number(a) for a in answers):
        return Matcher.NUMERIC, []
    distinct: dict[str, str] = {}
    for a in answers:
        distinct.setdefault(a.lower(), a)
    if len(distinct) <= MAX_CHOICES and len(distinct) < len(answers):
        return Matcher.CHOICE, list(distinct.values())
    if any(len(a.split()) > 1 for a in answers):
        return Matcher.NORMALISED, []
    return Matcher.EXACT, []


def check_matcher(matcher: Matcher, choices: list[str], examples: list[Example]) -> list[str]:
    """What goes wrong on the examples under `matcher` ([] when nothing does), one line per example."""
    problems = []
    for e in examples:
        def hit(reply: str, answer: str = e.answer) -> bool:
            return matches(matcher, reply, answer, choices)

        if not hit(e.answer):
            problems.append(f"line {e.line}: the answer {e.answer!r} does not match itself")
        elif hit("") or hit(GARBAGE):
            problems.append(f"line {e.line}: an empty or garbage reply matches {e.answer!r}")
        elif hit(e.prompt):
            problems.append(f"line {e.line}: repeating the prompt matches the answer {e.answer!r}: the prompt gives it away")
        else:
            wrong = [c for c in choices if c.lower() != e.answer.lower() and hit(c)]
            if wrong:
                problems.append(f"line {e.line}: the wrong choice {wrong[0]!r} matches")
    return problems


def client_files(task: str, examples: list[Example], matcher: Matcher, choices: list[str], source: str) -> dict[str, str]:
    """The files that make the qa template the client of these examples: {relative path: text}."""
    rows = "".join(json.dumps({"prompt": e.prompt, "answer": e.answer}) + "\n" for e in examples)
    n_test = max(1, len(examples) // 5)
    make_data = f'''"""Tasks from the examples in examples.jsonl (written by `vibe new --examples`): a seeded shuffle, one
in five held out for testing."""

import json
import random
from pathlib import Path

EXAMPLES = Path(__file__).with_name("examples.jsonl")
CHOICES = {choices!r}


def generate(seed):
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    tasks = [{{"id": f"ex-{{i}}", "prompt": r["prompt"], "gold": r["answer"], **({{"choices": CHOICES}} if CHOICES else {{}})}}
             for i, r in enumerate(rows)]
    random.Random(seed).shuffle(tasks)
    n_test = max(1, len(tasks) // 5)
    return {{"train": tasks[n_test:], "test": tasks[:n_test]}}
'''
    reward = f'''"""Rule reward: 1 when {DESCRIPTIONS[matcher]} (matcher `{matcher.value}`, chosen by
`vibe new --examples` from the examples' answers and checked on each of them), else 0."""

from vibe.answer_match import Matcher, matches

MATCHER = Matcher.{matcher.name}


def score(task, response):
    return {{"correct": 1.0 if matches(MATCHER, response, task["gold"], task.get("choices", ())) else 0.0}}
'''
    choice_note = f" The choices are {', '.join(repr(c) for c in choices)}." if choices else ""
    readme = f"""# {task}

A single-turn question-answering client built by `vibe new --examples` from {len(examples)} examples
({source}, copied to `examples.jsonl`). Each task is one of those prompts; the agent answers in one LLM
call. Reward component `correct`: 1 when {DESCRIPTIONS[matcher]} (matcher `{matcher.value}`), else 0.{choice_note}
`make_data.py` holds out {n_test} of the examples for testing and trains on the other {len(examples) - n_test}
(`vibe data .` rewrites `data/`; edit `examples.jsonl` to change the task). Check with `vibe check .`, train
with `vibe train . --steps 20`.
"""
    return {"examples.jsonl": rows, "make_data.py": make_data, "reward.py": reward, "README.md": readme}
