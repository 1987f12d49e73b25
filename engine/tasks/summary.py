"""One-sentence summaries of short texts, graded by an LLM judge: the built-in task without a checkable answer.

Each item is a short made-up news text (three sentences: the event, a detail, a side remark) and the
prompt asks for a one-sentence summary. There is no rule reward: the reward is an LLM judge's grade
against a rubric (engine.rewards.judge), in [0, 1]. The item's `answer` is a reference summary, written
from the same template; it is never shown to the judge, and the reward-hacking probes use it as the
honest reply (vibe.judge_probes).

The judge comes from the constructor, or from the environment when the task is built by name
(`swarm train --task judged_summary`): SWARM_JUDGE_BASE_URL or SWARM_JUDGE_SWARM_URL, SWARM_JUDGE_MODEL, and the
rest of JudgeConfig.from_env. Under fallback=exclude, `run` raises JudgeUnavailable for a reply the
judge could not grade, so the runner aborts the episode and it never trains.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from engine.rewards.judge import LLMJudge
from engine.rewards.judge_config import JudgeConfig
from engine.tasks.base import Item

__all__ = ["Summary"]

_WHO = ["The town council", "A local bakery", "The city library", "A school robotics team", "The river ferry service",
        "A small museum", "The hospital board", "A farmers' cooperative"]
_DID = [("opened", "a new reading room"), ("cancelled", "its summer festival"), ("won", "a national prize"),
        ("raised", "its prices"), ("hired", "twelve new staff"), ("closed", "its oldest branch")]
_WHY = ["after a year of planning", "because of a budget shortfall", "following complaints from residents",
        "after a vote on Monday", "to cope with rising demand"]
_ASIDE = ["The weather that day was mild.", "A spokesperson declined to comment further.",
          "Local newspapers covered the story briefly.", "Some residents said they had expected it."]
_DETAIL = ["The change takes effect next month.", "About two hundred people are affected.",
           "It is the first such change in ten years."]


class Summary:
    name = "judged_summary"

    def __init__(self, judge: LLMJudge | None = None) -> None:
        self._judge = judge
        self._lock = threading.Lock()

    @property
    def judge(self) -> LLMJudge:
        """The judge; built once from the environment (JudgeConfig.from_env) when none was given."""
        with self._lock:
            if self._judge is None:
                self._judge = LLMJudge(JudgeConfig.from_env())
            return self._judge

    def dataset(self, n: int, seed: int) -> list[Item]:
        rng = random.Random(seed)
        items = []
        for _ in range(n):
            who, (verb, what), why = rng.choice(_WHO), rng.choice(_DID), rng.choice(_WHY)
            aside, detail = rng.choice(_ASIDE), rng.choice(_DETAIL)
            text = f"{who} {verb} {what} {why}. {detail} {aside}"
            reference = f"{who} {verb} {what} {why}."
            item_id = "|".join((who, verb, why, aside, detail))
            items.append(Item(item_id, f"Summarise this text in one sentence.\n\n{text}", reference))
        return items

    def run(self, llm: Any, model: str, item: Item, sampling: dict[str, Any]) -> float:
        """Ask for the summary, then have the judge grade it (JudgeUnavailable: the episode is dropped)."""
        out = llm.chat.completions.create(model=model, messages=[{"role": "user", "content": item.prompt}], **sampling)
        return self.judge.score(item.prompt, out.choices[0].message.content or "").reward
