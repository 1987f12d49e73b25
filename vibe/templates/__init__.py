"""Offline templates for known task families, and the keyword matcher that picks one for a prompt.

Matching is deliberately simple (keyword counts): a prompt that names no family gets no template, and
the caller says an LLM endpoint is needed, rather than guessing.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

__all__ = ["Family", "TEMPLATES_DIR", "copy_template", "match_family"]

TEMPLATES_DIR = Path(__file__).parent


class Family(str, Enum):
    QA = "qa"
    TOOL_USE = "tool_use"
    GAME = "game"


@dataclass(frozen=True)
class _Family:
    family: Family
    summary: str
    keywords: tuple[str, ...]


FAMILIES = (
    _Family(Family.GAME, "who is the spy: a multi-agent game, one shared model, each role its own episodes",
            ("game", "games", "player", "players", "spy", "multi-agent", "multiagent", "agents", "vote", "voting",
             "undercover", "werewolf", "debate")),
    _Family(Family.TOOL_USE, "multi-turn tool use (a calculator tool, OpenAI tool calls)",
            ("tool", "tools", "calculator", "function", "calling", "multi-turn", "multiturn", "api", "search")),
    _Family(Family.QA, "single-turn question answering with a rule reward",
            ("question", "questions", "answer", "answering", "qa", "quiz", "arithmetic", "math", "single-turn")),
)


def match_family(prompt: str) -> Family | None:
    """The family whose keywords the prompt mentions most (ties: the listed order), or None."""
    words = re.findall(r"[a-z][a-z-]*", prompt.lower())
    best, hits = None, 0
    for f in FAMILIES:
        n = sum(1 for w in words if w in f.keywords)
        if n > hits:
            best, hits = f.family, n
    return best


def describe(family: Family) -> str:
    return next(f.summary for f in FAMILIES if f.family is family)


def copy_template(family: Family, out: Path) -> None:
    """Copy the template's files into `out` (which must not hold a client already)."""
    shutil.copytree(TEMPLATES_DIR / family.value, out, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
