"""Gold and anti-gold reward probes (pure): the reference answer must score high; empty, garbage,
"repeat the prompt" and decoy (another player's words) responses must score low.

A reward that pays for an echo of the prompt or for any non-empty text is hackable: RL finds such holes
long before it learns the task. These probes call `reward.score` directly, without a model.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from vibe.flags import Report, Severity, Stage

__all__ = ["ProbeLimits", "RewardValueError", "anti_gold_responses", "probe_rewards", "prompt_spans", "total"]


class ProbeLimits(BaseModel):
    """The thresholds the probes apply (vibe.yaml's; see vibe.config.VibeJob for their meaning)."""

    model_config = ConfigDict(frozen=True)

    reward_min: float
    reward_max: float
    gold_min: float
    anti_gold_max: float

ScoreFn = Callable[[dict[str, Any], str], dict[str, float]]


class RewardValueError(TypeError):
    """A reward that is not a non-empty dict of finite numbers; the message names the component."""


def total(components: Any) -> float:
    """The reward of a component dict: the sum of its values, which must be finite ints or floats.

    A string ("1.0"), a bool or a NaN is refused rather than converted: `float("nan") > x` is False, so a
    NaN would pass every threshold and then poison the advantages."""
    if not isinstance(components, dict) or not components:
        raise RewardValueError(
            f"a reward must be a non-empty dict of component name -> number, got {type(components).__name__}")
    for name, v in components.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise RewardValueError(f"reward component {name!r} is {v!r} ({type(v).__name__}), not a number")
        if not math.isfinite(v):
            raise RewardValueError(f"reward component {name!r} is {v}, not a finite number")
    return math.fsum(float(v) for v in components.values())


# numbers; quoted strings; sentences (up to . ? ! or a line end, a decimal point not ending one)
_SPANS = (re.compile(r"-?\d+(?:\.\d+)?"), re.compile(r"\"([^\"]+)\"|'([^']+)'"),
          re.compile(r"(?:[^.?!\n]|\.(?=\d))+[.?!]?"))


def prompt_spans(prompt: str) -> list[str]:
    """The pieces of a prompt a policy could copy: each number, each quoted string, each sentence.

    The echo probe repeats the whole prompt; a prompt that leaks its answer ("The answer is 1456. What is
    56 * 26?") ends on an operand, so only its spans reveal the leak."""
    spans = [next((g for g in m.groups() if g), m.group(0)).strip() for rx in _SPANS for m in rx.finditer(prompt)]
    return list(dict.fromkeys(s for s in spans if s and s != prompt.strip()))


def anti_gold_responses(task: dict[str, Any], seed: int = 0) -> dict[str, str]:
    """Responses that must not be rewarded, by probe name (`span_<i>`: a piece of the prompt)."""
    rng = random.Random(seed)
    words = ["lorem", "zebra", "quartz", "banana", "orbit", "velvet", "mosaic", "tundra", "#", "??", "~~"]
    out = {
        "empty": "",
        "garbage": " ".join(rng.choice(words) for _ in range(12)),
        "repeat_prompt": task["prompt"],
    }
    for i, span in enumerate(prompt_spans(task["prompt"])):
        out[f"span_{i}"] = span
    for i, d in enumerate(task.get("decoys") or []):
        out[f"decoy_{i}"] = d
    return out


def probe_rewards(score: ScoreFn, tasks: list[dict[str, Any]], job: ProbeLimits, report: Report) -> None:
    """Score the gold and anti-gold responses of `tasks` and add flags to `report`."""
    low_gold: list[str] = []
    hacked: dict[str, list[str]] = {}
    gold_scores: list[float] = []
    calls, raised, invalid = 0, [], []

    def scored(t: dict[str, Any], name: str, resp: str) -> float | None:
        nonlocal calls
        calls += 1
        try:
            comps = score(t, resp)
        except Exception as e:  # noqa: BLE001 - any failure of client code is the finding
            raised.append((t["id"], name, resp, f"{type(e).__name__}: {e}"))
            return None
        try:
            return total(comps)
        except RewardValueError as e:
            invalid.append((t["id"], name, str(e)))
            return None

    for t in tasks:
        g = scored(t, "gold", t["gold"])
        if g is not None:
            gold_scores.append(g)
            if not job.reward_min <= g <= job.reward_max:
                report.add(Stage.PROBES, "reward_out_of_range", Severity.ERROR,
                           f"gold of task {t['id']!r} scores {g}, outside [{job.reward_min}, {job.reward_max}] (vibe.yaml)")
                return
            if g < job.gold_min:
                low_gold.append(f"{t['id']} ({g:.3g})")
        for name, resp in anti_gold_responses(t).items():
            s = scored(t, name, resp)
            kind = "decoy" if name.startswith("decoy_") else "prompt_span" if name.startswith("span_") else name
            # a piece of the prompt may rightly earn partial credit (a game's "Round 1." says "round" of an
            # apple); it is a leak when it scores like the reference answer
            limit = job.gold_min if kind == "prompt_span" else job.anti_gold_max
            if s is not None and (s >= limit if kind == "prompt_span" else s > limit):
                hacked.setdefault(kind, []).append(f"{t['id']} ({s:.3g}" + (f" for {resp!r})" if kind == "prompt_span" else ")"))
    if invalid:
        tid, name, why = invalid[0]
        report.add(Stage.PROBES, "reward_not_a_number", Severity.ERROR,
                   f"reward.score returned an invalid reward on {len(invalid)} of {calls} probe call(s); first: task "
                   f"{tid!r}, {name} response: {why}; return finite numbers (0.0 for a reply it cannot score)")
    if raised:
        tid, name, resp, err = raised[0]
        if len(raised) == calls:
            report.add(Stage.PROBES, "score_raises", Severity.ERROR,
                       f"reward.score raised on every probe call; first: task {tid!r}, {name} response: {err}")
        else:
            report.add(Stage.PROBES, "score_raises_intermittently", Severity.ERROR,
                       f"reward.score raised on {len(raised)} of {calls} probe calls ({len(raised) / calls:.0%}); e.g. task "
                       f"{tid!r} with the {name} response {resp[:60]!r}: {err}; a reward must score any text, including empty",
                       frequency=len(raised) / calls)
    if low_gold:
        report.add(Stage.PROBES, "gold_scores_low", Severity.ERROR,
                   f"the reference answer scores below gold_min={job.gold_min} on {len(low_gold)} task(s): "
                   f"{', '.join(low_gold[:3])}; the reward cannot recognise a right answer")
    for kind, where in hacked.items():
        if kind == "prompt_span":
            what = f"a piece of the prompt scores at least gold_min={job.gold_min}, like the reference answer,"
            hint = "; the prompt gives the answer away"
        else:
            what = f"a {kind.replace('_', ' ')} response scores above anti_gold_max={job.anti_gold_max}"
            hint = "; the policy would learn to exploit this instead of the task"
        report.add(Stage.PROBES, f"hackable_{kind}", Severity.ERROR,
                   f"{what} on {len(where)} task(s): {', '.join(where[:3])}{hint}", probe=kind)
    report.stats["gold_mean"] = sum(gold_scores) / len(gold_scores) if gold_scores else None
