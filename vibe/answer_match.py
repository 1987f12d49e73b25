"""Answer matchers of QA clients built from examples (`vibe new --examples`); pure, imported by their reward.

Each matcher decides whether a reply gives the gold answer:

- numeric: the reply's last number equals the answer (models restate the question first; an echo of a
  question ends on an operand, not on the result);
- choice: the reply names exactly one of the task's choices, and it is the answer (naming every choice,
  as an echo of "yes or no?" does, earns nothing);
- normalised: the reply equals the answer up to case, spacing and prose punctuation;
- exact: the reply, stripped of surrounding whitespace, equals the answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum

__all__ = ["DESCRIPTIONS", "Matcher", "is_number", "last_number", "matches", "normal_text"]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_PROSE_PUNCTUATION = re.compile(r"[.,;:!?\"'`]")  # operators (+ - * / = ...) stay: "41*42" is not "41+42"


class Matcher(str, Enum):
    NUMERIC = "numeric"
    CHOICE = "choice"
    NORMALISED = "normalised"
    EXACT = "exact"


DESCRIPTIONS = {
    Matcher.NUMERIC: "the last number in the reply equals the answer",
    Matcher.CHOICE: "the reply names exactly one of the task's choices, and it is the answer",
    Matcher.NORMALISED: "the reply equals the answer up to case, spacing and punctuation",
    Matcher.EXACT: "the reply, stripped of surrounding whitespace, equals the answer exactly",
}


def normal_text(text: str) -> str:
    """Lower case, prose punctuation dropped, runs of whitespace as one space."""
    return " ".join(_PROSE_PUNCTUATION.sub(" ", text.lower()).split())


def last_number(text: str) -> float | None:
    """The last number written in `text` (thousands commas allowed), or None."""
    found = _NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def is_number(text: str) -> bool:
    """Whether `text` is one number and nothing else ("1,456", "-3.5")."""
    return _NUMBER.fullmatch(text.strip()) is not None


def _named(reply: str, choice: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(choice)}(?!\w)", reply, re.IGNORECASE) is not None


def matches(matcher: Matcher, reply: str, answer: str, choices: Sequence[str] = ()) -> bool:
    """Whether `reply` gives `answer` under `matcher` (`choices`: the task's options, for CHOICE)."""
    if matcher is Matcher.NUMERIC:
        got, want = last_number(reply), last_number(answer)
        return got is not None and want is not None and got == want
    if matcher is Matcher.CHOICE:
        named = {c.lower() for c in choices if _named(reply, c)}
        return named == {answer.lower()}
    if matcher is Matcher.NORMALISED:
        return bool(normal_text(answer)) and normal_text(reply) == normal_text(answer)
    return reply.strip() == answer.strip()
