"""Gold and anti-gold reward probes (pure): the reference answer must score high; empty, garbage,
"repeat the prompt" and decoy (another player's words) responses must score low.

A reward that pays for an echo of the prompt or for any non-empty text is hackable: RL finds such holes
long before it learns the task. These probes call `reward.score` directly, without a model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from vibe.flags import Report, Severity, Stage

__all__ = ["ProbeLimits", "anti_gold_responses", "probe_rewards", "total"]


class ProbeLimits(BaseModel):
    """The thresholds the probes apply (vibe.yaml's; see vibe.config.VibeJob for their meaning)."""

    model_config = ConfigDict(frozen=True)

    reward_min: float
    reward_max: float
    gold_min: float
    anti_gold_max: float

ScoreFn = Callable[[dict[str, Any], str], dict[str, float]]


def total(components: Any) -> float:
    """The reward of a component dict (their sum); raises TypeError for anything else."""
    if not isinstance(components, dict) or not components:
        raise TypeError(f"a reward must be a non-empty dict of component name -> number, got {type(components).__name__}")
    values = [float(v) for v in components.values()]
    return math.fsum(values)


def anti_gold_responses(task: dict[str, Any], seed: int = 0) -> dict[str, str]:
    """Responses that must not be rewarded, by probe name."""
    rng = random.Random(seed)
    words = ["lorem", "zebra", "quartz", "banana", "orbit", "velvet", "mosaic", "tundra", "#", "??", "~~"]
    out = {
        "empty": "",
        "garbage": " ".join(rng.choice(words) for _ in range(12)),
        "repeat_prompt": task["prompt"],
    }
    for i, d in enumerate(task.get("decoys") or []):
        out[f"decoy_{i}"] = d
    return out


def probe_rewards(score: ScoreFn, tasks: list[dict[str, Any]], job: ProbeLimits, report: Report) -> None:
    """Score the gold and anti-gold responses of `tasks` and add flags to `report`."""
    low_gold: list[str] = []
    hacked: dict[str, list[str]] = {}
    gold_scores: list[float] = []
    for t in tasks:
        try:
            g = total(score(t, t["gold"]))
        except Exception as e:  # noqa: BLE001 - any failure of client code is the finding
            report.add(Stage.PROBES, "score_raises", Severity.ERROR,
                       f"reward.score raised on task {t['id']!r} with its gold response: {type(e).__name__}: {e}")
            return
        gold_scores.append(g)
        if not job.reward_min <= g <= job.reward_max or not math.isfinite(g):
            report.add(Stage.PROBES, "reward_out_of_range", Severity.ERROR,
                       f"gold of task {t['id']!r} scores {g}, outside [{job.reward_min}, {job.reward_max}] (vibe.yaml)")
            return
        if g < job.gold_min:
            low_gold.append(f"{t['id']} ({g:.3g})")
        for name, resp in anti_gold_responses(t).items():
            try:
                s = total(score(t, resp))
            except Exception as e:  # noqa: BLE001
                report.add(Stage.PROBES, "score_raises", Severity.ERROR,
                           f"reward.score raised on task {t['id']!r} with the {name} response: {type(e).__name__}: {e}; "
                           "a reward must score any text, including empty")
                return
            if s > job.anti_gold_max:
                kind = "decoy" if name.startswith("decoy_") else name
                hacked.setdefault(kind, []).append(f"{t['id']} ({s:.3g})")
    if low_gold:
        report.add(Stage.PROBES, "gold_scores_low", Severity.ERROR,
                   f"the reference answer scores below gold_min={job.gold_min} on {len(low_gold)} task(s): "
                   f"{', '.join(low_gold[:3])}; the reward cannot recognise a right answer")
    for kind, where in hacked.items():
        report.add(Stage.PROBES, f"hackable_{kind}", Severity.ERROR,
                   f"a {kind.replace('_', ' ')} response scores above anti_gold_max={job.anti_gold_max} on "
                   f"{len(where)} task(s): {', '.join(where[:3])}; the policy would learn to exploit this instead of the task",
                   probe=kind)
    report.stats["gold_mean"] = sum(gold_scores) / len(gold_scores) if gold_scores else None
