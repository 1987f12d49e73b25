"""Offline templates for known task families, and the keyword matcher that picks one for a prompt.

Matching is deliberately strict: a template trains one task (arithmetic, a calculator tool, who is the
spy, news summaries graded by an LLM judge), so a prompt must name that task's subject to get it; among the templates it names, keyword counts
pick one. A prompt that names none gets no template and the caller refuses, listing what each trains,
rather than build a client for another task ("yes/no questions about primes" is not arithmetic QA).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

__all__ = ["Family", "TEMPLATES_DIR", "catalogue", "copy_template", "describe", "match_family"]

TEMPLATES_DIR = Path(__file__).parent


class Family(str, Enum):
    QA = "qa"
    TOOL_USE = "tool_use"
    GAME = "game"
    SUMMARY = "summary"


@dataclass(frozen=True)
class _Family:
    family: Family
    summary: str
    subjects: tuple[str, ...]  # at least one must occur: the task the template actually trains
    keywords: tuple[str, ...]
    requires: tuple[str, ...] = ()  # when given, one of these must occur too (summaries: of news items)


FAMILIES = (
    _Family(Family.GAME, "who is the spy: a multi-agent word game (civilians and spies describe, then vote), "
            "one shared model, each role its own episodes",
            ("spy", "spies", "undercover"),
            ("game", "games", "player", "players", "spy", "multi-agent", "multiagent", "agents", "vote", "voting",
             "undercover", "werewolf", "debate")),
    _Family(Family.TOOL_USE, "multi-turn tool use: arithmetic through a calculator tool (OpenAI tool calls), "
            "rewarded when the final integer is right",
            ("calculator",),
            ("tool", "tools", "calculator", "function", "calling", "multi-turn", "multiturn", "api", "search")),
    _Family(Family.QA, "single-turn arithmetic questions (sums and products of integers), rewarded when the "
            "reply's last integer is the answer",
            ("arithmetic", "math", "maths", "mathematics", "sum", "sums", "addition", "subtraction", "multiplication",
             "multiply", "add", "product", "products"),
            ("question", "questions", "answer", "answering", "qa", "quiz", "arithmetic", "math", "single-turn")),
    _Family(Family.SUMMARY, "one-sentence summaries of short news items, graded by an LLM judge (no checkable "
            "answer; the judge's endpoint in vibe.yaml or SWARM_JUDGE_*)",
            ("summary", "summaries", "summarise", "summarize", "summarising", "summarizing"),
            ("summary", "summaries", "summarise", "summarize", "news", "sentence", "one-sentence", "text", "texts",
             "article", "articles", "judge", "items"),
            ("news",)),
)


def match_family(prompt: str) -> Family | None:
    """The template for the prompt: among the families whose subject it names, the one whose keywords it
    mentions most (ties: the listed order); None when it names no family's subject."""
    words = re.findall(r"[a-z][a-z-]*", prompt.lower())
    best, hits = None, -1
    for f in FAMILIES:
        if not any(w in f.subjects for w in words) or (f.requires and not any(w in f.requires for w in words)):
            continue
        n = sum(1 for w in words if w in f.keywords or w in f.subjects)
        if n > hits:
            best, hits = f.family, n
    return best


def catalogue() -> str:
    """Every template and what it trains, one per line (for refusals)."""
    return "\n".join(f"  {f.family.value}: {f.summary}" for f in FAMILIES)


def describe(family: Family) -> str:
    return next(f.summary for f in FAMILIES if f.family is family)


def copy_template(family: Family, out: Path) -> None:
    """Copy the template's files into `out` (which must not hold a client already)."""
    shutil.copytree(TEMPLATES_DIR / family.value, out, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
