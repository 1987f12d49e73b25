"""The judge's prompt and the reading of its answer (pure functions).

`parse_score` reads a score and refuses what it cannot read with certainty: no score, two different
scores, a score outside the scale or on another scale ("4/5" on a 1..10 scale). A refused answer is never
guessed into a number: the judge is asked again, then the config's fallback applies.
"""

from __future__ import annotations

import re

from engine.rewards.judge_config import JudgeConfig, ParseMode

__all__ = ["ScoreUnparseable", "example_score", "judge_messages", "normalise", "parse_score"]

_NUM = r"(-?\d+(?:\.\d+)?)"
_LABELLED = re.compile(rf"\bscore\b\s*(?:is|of)?\s*[:=]?\s*\**\s*{_NUM}(?:\s*(?:/|out of)\s*(\d+))?", re.IGNORECASE)
_FRACTION = re.compile(rf"{_NUM}\s*(?:/|out of)\s*(\d+)", re.IGNORECASE)
_BARE = re.compile(rf"\s*\**{_NUM}\**\s*\.?\s*")


class ScoreUnparseable(ValueError):
    """The judge's answer holds no single in-range score; the message says why."""


def _grading_request(rubric: str, prompt: str, reply: str) -> str:
    return (f"Rubric: {rubric}\n\n<task>\n{prompt}\n</task>\n\n<reply>\n{reply}\n</reply>\n\n"
            f"Grade the reply. Answer 'Score: N'.")


def example_score(grade: float, cfg: JudgeConfig) -> int:
    """An example's `grade` (a fraction of the scale) as an integer score on the config's scale."""
    return cfg.scale_min + round(grade * (cfg.scale_max - cfg.scale_min))


def judge_messages(cfg: JudgeConfig, prompt: str, reply: str) -> list[dict[str, str]]:
    """The chat the judge sees: the answer format, the config's graded examples as earlier turns, then the
    rubric, the task's prompt and the reply to grade."""
    system = (f"You grade replies against a rubric. Answer with one line 'Score: N', N an integer from "
              f"{cfg.scale_min} (worst) to {cfg.scale_max} (best). Grade only what the rubric asks.")
    messages = [{"role": "system", "content": system}]
    for ex in cfg.examples:
        messages.append({"role": "user", "content": _grading_request(ex.rubric, ex.prompt, ex.reply)})
        messages.append({"role": "assistant", "content": f"Score: {example_score(ex.grade, cfg)}"})
    messages.append({"role": "user", "content": _grading_request(cfg.rubric, prompt, reply)})
    return messages


def _scores(pattern: re.Pattern[str], text: str, cfg: JudgeConfig) -> list[float]:
    out = []
    for m in pattern.finditer(text):
        if m.group(2) is not None and int(m.group(2)) != cfg.scale_max:
            raise ScoreUnparseable(f"the score {m.group(0)!r} is on another scale than {cfg.scale_min}..{cfg.scale_max}")
        out.append(float(m.group(1)))
    return out


def parse_score(text: str | None, cfg: JudgeConfig) -> float:
    """The score in the judge's answer `text`, on the config's scale; ScoreUnparseable when there is none."""
    text = text or ""
    found = _scores(_LABELLED, text, cfg)
    if not found and cfg.parse is ParseMode.LENIENT:
        found = _scores(_FRACTION, text, cfg)
        if not found and (m := _BARE.fullmatch(text)):
            found = [float(m.group(1))]
    if not found:
        what = "'Score: N'" if cfg.parse is ParseMode.LABELLED else "'Score: N', 'N/MAX' or a bare number"
        raise ScoreUnparseable(f"no score in the judge's answer (expected {what}): {text[:120]!r}")
    if len(set(found)) > 1:
        raise ScoreUnparseable(f"the judge's answer gives conflicting scores {sorted(set(found))}: {text[:120]!r}")
    score = found[0]
    if not cfg.scale_min <= score <= cfg.scale_max:
        raise ScoreUnparseable(f"the score {score:g} is outside the scale {cfg.scale_min}..{cfg.scale_max}")
    return score


def normalise(score: float, cfg: JudgeConfig) -> float:
    """A score on the judge's scale as a reward in [0, 1]: scale_min -> 0, scale_max -> 1."""
    return (score - cfg.scale_min) / (cfg.scale_max - cfg.scale_min)
