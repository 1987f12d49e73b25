"""The research goal as data: the studied variable (`Factor`), what "achieves Y" means (`Criterion`) and
the whole question (`Goal`), validated at construction. The offline parser (`a3r.leader.goals`) and the
LLM's reading (`a3r.leader.goal_llm`) both produce a `Goal`; the design and analysis code act on it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from a3r.leader.knobs import KNOBS, Knob, get_knob

__all__ = ["Criterion", "Factor", "Goal", "Shape"]

Shape = Literal["minimum", "maximum", "best", "effect", "compare"]


class Factor(BaseModel):
    """A studied variable with its range (`low`..`high`) or explicit set of `values`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(description="Dotted TrainJob key, e.g. swarm.pool.batch_size.")
    low: float | None = None
    high: float | None = None
    values: list[Any] | None = Field(None, description="Explicit levels (a set, compared values or choices).")

    @model_validator(mode="after")
    def _check(self) -> Factor:
        try:
            knob = get_knob(self.key)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        if self.values is not None:
            if len(self.values) < 1:
                raise ValueError(f"{knob.name}: an explicit set needs at least one value")
            object.__setattr__(self, "values", [knob.coerce(v) for v in self.values])
        elif knob.kind == "choice":
            object.__setattr__(self, "values", list(knob.valid_choices()))
        else:
            if self.low is None or self.high is None:
                raise ValueError(f"{knob.name} needs a range (low, high) or a set of values")
            lo, hi = knob.coerce(self.low), knob.coerce(self.high)
            if not lo < hi:
                raise ValueError(f"{knob.name} range must have low < high, got {lo:g} to {hi:g}")
            if knob.scale == "log" and lo <= 0:
                raise ValueError(
                    f"{knob.name} is searched on a log scale, so its range must be > 0, got {lo:g}"
                )
            object.__setattr__(self, "low", lo)
            object.__setattr__(self, "high", hi)
        return self

    @property
    def knob(self) -> Knob:
        return get_knob(self.key)

    @property
    def name(self) -> str:
        return self.knob.name

    def describe(self) -> str:
        if self.values is not None:
            return f"{self.name} in {{{', '.join(str(v) for v in self.values)}}}"
        return f"{self.name} from {self.low:g} to {self.high:g}"


class Criterion(BaseModel):
    """What "achieves Y" means for minimum/maximum goals, fixed before any grid data is seen.

    relative: an arm achieves Y when its gain over the untrained level keeps `value` of the reference
    configuration's gain, measured on the calibration stage's own seeds (so the criterion carries an
    interval and does not move with the grid's best arm).
    absolute: when its score reaches `value` itself (a researcher's number, e.g. accuracy 0.5).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["relative", "absolute"] = "relative"
    value: float = Field(
        0.0,
        ge=0,
        description="Fraction of the reference configuration's gain (relative; 0: it trains at all) or metric "
        "level (absolute).",
    )

    def describe(self, metric: str) -> str:
        if self.kind == "absolute":
            return f"{metric} >= {self.value:g} (the arm's interval above it)"
        if self.value == 0:
            return f"still trains: its gain in {metric} over the untrained level has an interval above 0"
        return (
            f"keeps >= {self.value:.0%} of the reference configuration's gain in {metric} over the untrained "
            "level (reference gain measured in the calibration stage)"
        )


class Goal(BaseModel):
    """A research question in a form the design and analysis code can act on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(description="The researcher's sentence, verbatim.")
    shape: Shape
    factor: Factor
    secondary: Factor | None = Field(None, description="A second variable crossed with the first.")
    task: str = "arithmetic"
    fixed: dict[str, Any] = Field(
        default_factory=dict, description="Dotted TrainJob key -> value for every arm."
    )
    metric: str = Field(
        "eval_accuracy",
        description="Metric the analysis reads (higher is better): held-out greedy accuracy by default, "
        "measured at step 0, at checkpoints and at the end.",
    )
    statistic: Literal["final", "auc"] = Field(
        "final", description="Per-run score: final (mean of the last steps) or auc (mean over the curve)."
    )
    criterion: Criterion = Criterion()
    steps: int | None = Field(None, ge=1, description="Training steps per run, when the goal names them.")
    refine: bool = Field(
        False,
        description="The goal asks for values between the named ones too; without it an explicit set is "
        "exactly the set studied (a range is always refined).",
    )
    assumptions: list[str] = Field(default_factory=list, description="What the parser filled in, said aloud.")

    @model_validator(mode="after")
    def _check(self) -> Goal:
        if self.secondary is not None and self.secondary.key == self.factor.key:
            raise ValueError("the secondary variable must differ from the studied one")
        if self.shape == "compare" and (self.factor.values is None or len(self.factor.values) < 2):
            raise ValueError("a comparison needs at least two values")
        tasks = get_knob("task").valid_choices()
        if self.task not in tasks:
            raise ValueError(f"task {self.task!r} is not a built-in task; valid: {', '.join(tasks)}")
        required = {k for knob in KNOBS for k in knob.requires}
        fixed = {}
        for key, value in self.fixed.items():
            if key in required:
                fixed[key] = value
                continue
            try:
                knob = get_knob(key)  # an alias ("lr") becomes its TrainJob key
                fixed[knob.key] = knob.coerce(value)
            except KeyError as e:
                raise ValueError(f"fixed setting {key!r}: {e.args[0]}") from None
        object.__setattr__(self, "fixed", fixed)
        return self

    def describe(self) -> str:
        """The question restated from the parsed fields (shown back to the researcher)."""
        what = {
            "minimum": f"the smallest {self.factor.name} that still trains {self.task}",
            "maximum": f"the largest {self.factor.name} that still trains {self.task}",
            "best": f"the {self.factor.name} that trains {self.task} best",
            "effect": f"the effect of {self.factor.name} on training {self.task}",
            "compare": f"which {self.factor.name} trains {self.task} better",
        }[self.shape]
        s = f"Find {what}, over {self.factor.describe()}, scored by the {self.statistic} {self.metric}"
        if self.secondary is not None:
            s += f"; and whether {self.secondary.describe()} changes the answer"
        return s + "."
