"""The LLM's reading of a research goal: the same typed `Goal` the offline parser makes, validated, with the
offline parse as the fallback.

The LLM answers a `GoalSpec` (JSON); `goal_from_spec` turns it into a `Goal` through the same validators
(known variables, valid values, ranges with low < high) and then checks what a schema cannot:
- every number of the studied and secondary variables is the researcher's: named in the sentence (as
  written, or as `Knob.per` units divided, e.g. 16 episodes per batch at group size 4 is batch size 4), or
  an end of the variable's default range. An LLM that "helpfully" adds in-between values, or rounds 1.5e-5
  to 1e-5, is told so and asked again;
- a range where the offline parser reads a named set for the same variable is the researcher's set dropped,
  and is sent back too;
- a minimum/maximum has a criterion the analysis can test, and a comparison two or more values (the `Goal`
  validator).
Invalid answers are fed back (`JsonChat.ask`); when the endpoint gives nothing usable the offline parser
reads the goal, and the goal's assumptions say so. Numbers in reports never come from here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from a3r.leader.goals import Criterion, Factor, Goal, GoalParseError, named_numbers, parse_goal
from a3r.leader.knobs import get_knob

__all__ = ["FactorSpec", "GoalSpec", "goal_from_spec", "goal_prompt", "read_goal"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FactorSpec(_Strict):
    variable: str = Field(description="Dotted TrainJob key of a known variable.")
    low: float | None = None
    high: float | None = None
    values: list[Any] | None = None


class GoalSpec(_Strict):
    shape: Literal["minimum", "maximum", "best", "effect", "compare"]
    factor: FactorSpec
    secondary: FactorSpec | None = None
    task: str = "arithmetic"
    fixed: dict[str, Any] = Field(default_factory=dict)
    statistic: Literal["final", "auc"] = "final"
    criterion: Criterion = Criterion()
    steps: int | None = None
    refine: bool = False
    assumptions: list[str] = Field(default_factory=list)


# How the offline parser reads goals (goals.py), said to the LLM so both readings agree.
RULES = """\
- Values the researcher names are exactly the values studied: "3e-6, 1.5e-5 or 6e-5" is values [3e-6, 1.5e-5, \
6e-5], never a range and never with values added in between. Only a range ("1 to 64", "between 1e-6 and 1e-4", \
"somewhere from 3e-6 to 1e-4", "[1e-6, 1e-4]") is low/high. Set refine true only if the goal asks for values \
between the named ones.
- Copy numbers as written (1.5e-5 stays 1.5e-5). With no values or range named, give the variable's default range.
- shape: "need", "enough", "how small can", "smallest", "fewest", "minimum" ask for a minimum; "largest", \
"how high can" a maximum; three or more named values under "which" (or compared) ask for the best; two values \
compared are compare; "does X matter", "effect of X" are effect.
- "fastest", "quickest", "efficiently" score the speed of learning: statistic "auc"; otherwise "final".
- A second variable in "and whether Y changes that" is the secondary factor."""


def goal_prompt(text: str) -> str:
    """The request for the LLM's reading of `text`."""
    return (
        f"Research goal: {text!r}\n\nTurn it into this JSON schema: {json.dumps(GoalSpec.model_json_schema())}\n"
        "factor/secondary.variable must be one of the TrainJob keys above; give low+high or values.\n"
        f"Rules:\n{RULES}"
    )


def _factor(spec: FactorSpec) -> Factor:
    return Factor(key=get_knob(spec.variable).key, low=spec.low, high=spec.high, values=spec.values)


def _numbers_of(factor: Factor) -> list[float]:
    if factor.values is not None:
        return [float(v) for v in factor.values if isinstance(v, int | float) and not isinstance(v, bool)]
    return [float(factor.low), float(factor.high)]


def _allowed(text: str, factor: Factor, fixed: dict[str, Any]) -> list[float]:
    """Numbers the factor may take from `text`: as written, per-unit ones divided, the default range."""
    from engine.config import SwarmConfig

    said = named_numbers(text)
    allowed = [*said, *(factor.knob.default_range or ())]
    for per_key in set(factor.knob.per.values()):
        n = fixed.get(per_key) or getattr(SwarmConfig().pool, per_key.rsplit(".", 1)[-1])
        allowed += [x / n for x in said]
    return allowed


def _check_numbers(text: str, goal: Goal) -> None:
    for role, factor in (("studied", goal.factor), ("secondary", goal.secondary)):
        if factor is None or factor.knob.kind == "choice":
            continue
        allowed = _allowed(text, factor, goal.fixed)
        invented = [
            x for x in _numbers_of(factor) if not any(math.isclose(x, a, rel_tol=1e-9) for a in allowed)
        ]
        if invented:
            raise ValueError(
                f"the {role} variable {factor.name} has {', '.join(f'{x:g}' for x in invented)}, which the goal "
                "does not name: use exactly the values or range the researcher wrote (or the default range "
                f"{factor.knob.default_range} when none is named)"
            )


def _check_named_set(text: str, goal: Goal) -> None:
    """A range where the offline parser reads the values the sentence names for the same variable: the
    LLM dropped the researcher's set (a default range has no numbers of its own to check)."""
    try:
        offline = parse_goal(text)
    except GoalParseError:
        return
    if offline.factor.key == goal.factor.key and offline.factor.values is not None and goal.factor.values is None:
        named = ", ".join(str(v) for v in offline.factor.values)
        raise ValueError(
            f"the goal names the {goal.factor.name} values {named}: study exactly those (values), not a range"
        )


def goal_from_spec(text: str, spec: GoalSpec) -> Goal:
    """The validated `Goal` of an LLM answer; ValueError (fed back to the LLM) says what is wrong."""
    goal = Goal(
        text=text,
        shape=spec.shape,
        factor=_factor(spec.factor),
        secondary=_factor(spec.secondary) if spec.secondary else None,
        task=spec.task,
        fixed=spec.fixed,
        statistic=spec.statistic,
        criterion=spec.criterion,
        steps=spec.steps,
        refine=spec.refine,
        assumptions=spec.assumptions,
    )
    _check_numbers(text, goal)
    _check_named_set(text, goal)
    return goal


def read_goal(
    ask: Callable[[str, type[BaseModel], Callable[[Any], Goal]], Goal],
    text: str,
    offline: Callable[[str], Goal],
    fallback_errors: tuple[type[Exception], ...],
    on_fallback: Callable[[Exception], None],
) -> Goal:
    """The LLM's reading of `text` through `ask` (a `JsonChat.ask`), else the offline parser's.

    `fallback_errors` are the endpoint's failures that hand the goal to `offline`; `on_fallback` reports
    one. When the offline parser cannot read the goal either, the `GoalParseError` says both failed."""
    try:
        return ask(goal_prompt(text), GoalSpec, lambda spec: goal_from_spec(text, spec))
    except fallback_errors as e:
        try:
            goal = offline(text)
        except GoalParseError as pe:
            raise GoalParseError(f"the LLM failed ({e}) and {pe.problem}", pe.understood, text) from None
        on_fallback(e)
        return goal.model_copy(
            update={"assumptions": [*goal.assumptions, f"read by the offline parser: {e}"]}
        )
