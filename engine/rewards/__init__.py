"""Rewards that are not rules: an LLM judge that grades a reply against a rubric (engine.rewards.judge)."""

from engine.rewards.judge import JudgeUnavailable, JudgeVerdict, LLMJudge
from engine.rewards.judge_config import Fallback, JudgeConfig, ParseMode
from engine.rewards.judge_score import ScoreUnparseable, parse_score

__all__ = ["Fallback", "JudgeConfig", "JudgeUnavailable", "JudgeVerdict", "LLMJudge", "ParseMode", "ScoreUnparseable",
           "parse_score"]
