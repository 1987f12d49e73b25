"""The research goal as data, and the offline, deterministic parser for the common question shapes.

Shapes (`Goal.shape`):
- `minimum` / `maximum`: the smallest (largest) X that still achieves Y -- "find the smallest batch size
  that still trains arithmetic efficiently (1 to 64)";
- `best`: the best X in a range or set -- "best learning rate for countdown between 1e-6 and 1e-4";
- `effect`: the effect of X on Y -- "how does group size affect arithmetic?";
- `compare`: A versus B -- "gspo versus ppo_clip on countdown".
A secondary factor ("..., and whether max response length changes that") becomes a second variable that
is crossed with the first, and the question is answered at each of its levels.

The parser is a set of regular expressions over a normalised sentence, not a language model: it answers
exactly these shapes and says so. A goal it cannot parse raises `GoalParseError` whose message states what
it understood and lists the forms that work. Numbers it reads (ranges, thresholds) are the researcher's;
the LLM policy produces the same `Goal` through a validated schema instead.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from a3r.leader.knobs import KNOBS, Knob, find_knob, get_knob

__all__ = ["FORMS", "Criterion", "Factor", "Goal", "GoalParseError", "parse_goal"]

Shape = Literal["minimum", "maximum", "best", "effect", "compare"]

FORMS = (
    "find the smallest <variable> that still trains <task> (<low> to <high>)",
    "find the largest <variable> that still trains <task> [, and whether <variable> changes that]",
    "find the best <variable> for <task> between <low> and <high>   |   ... in {a, b, c}",
    "what is the effect of <variable> on <task>   |   how does <variable> affect <task>",
    "compare <A> versus <B> on <task>   (values of one variable, e.g. gspo versus ppo_clip, or batch size 8 vs 32)",
)


class GoalParseError(ValueError):
    """The offline parser could not turn the sentence into a `Goal`; the message says what it understood."""

    def __init__(self, problem: str, understood: dict[str, Any]):
        self.problem, self.understood = problem, dict(understood)
        seen = ", ".join(f"{k}={v}" for k, v in understood.items()) or "nothing usable"
        variables = ", ".join(k.name for k in KNOBS)
        forms = "\n".join(f"  - {f}" for f in FORMS)
        super().__init__(
            f"cannot understand the goal: {problem}.\nUnderstood so far: {seen}.\n"
            f"Goals of these forms work:\n{forms}\nVariables: {variables}.\n"
            "Configure an LLM endpoint (A3R_LLM_BASE_URL, A3R_LLM_MODEL) for free-form goals."
        )


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
        0.5, description="Fraction of the reference configuration's gain (relative) or metric level (absolute)."
    )

    def describe(self, metric: str) -> str:
        if self.kind == "absolute":
            return f"{metric} >= {self.value:g} (the arm's interval above it)"
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


# -- the parser -----------------------------------------------------------------------------------------
_NUM = r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
_FREE = r"(?<![\w.])"  # a number must stand alone: "smollm2-135m" holds no range
_END = r"(?![\w.]|\.\d)"
_RANGE = [
    re.compile(rf"between\s+{_FREE}{_NUM}\s+and\s+{_NUM}{_END}"),
    re.compile(rf"{_FREE}{_NUM}\s*(?:to|-|\.\.|through)\s*{_NUM}{_END}"),
    re.compile(rf"\[\s*{_NUM}\s*,\s*{_NUM}\s*\]"),
]
_SET = [
    re.compile(rf"\{{\s*({_NUM[1:-1]}(?:\s*,\s*{_NUM[1:-1]})+)\s*\}}"),
    re.compile(
        rf"(?:in|among|of|from|values?)\s+\(?\s*({_NUM[1:-1]}(?:\s*,\s*{_NUM[1:-1]})*\s*,?\s*(?:and|or)\s+{_NUM[1:-1]})\)?"
    ),
]
_SINGLE = re.compile(rf"^\s*(?:=|:|of|is|at|to)?\s*{_FREE}{_NUM}{_END}")
_TRIGGER = re.compile(r"\b(?:whether|if|how|does|do)\b|\bdepend(?:s|ing)?\s+on\b")
_CHANGE = re.compile(r"\b(?:chang|affect|influenc|alter|shift|mov|matter|impact|modif|depend)\w*")
_COMPARE = re.compile(r"\b(?:versus|vs\.?|compared?\s+(?:to|with)|against)\b|^\s*compare\b|\bwhich\b.*\bor\b")
_MIN = re.compile(
    r"\b(?:minimum|minimal|smallest|lowest|least|fewest|min)\s+(?:possible\s+|viable\s+|usable\s+)?<K(\d+)>"
    r"|\bhow\s+(?:small|low|few)\s+(?:can|could|may|might)\s+(?:the\s+)?<K(\d+)>"
    r"|<K(\d+)>\s+(?:as\s+)?(?:small|low)\s+as\b"
)
_MAX = re.compile(
    r"\b(?:maximum|maximal|largest|highest|biggest|greatest|max|most)\s+(?:possible\s+|viable\s+|usable\s+)?<K(\d+)>"
    r"|\bhow\s+(?:large|big|high|many)\s+(?:can|could|may|might)\s+(?:the\s+)?<K(\d+)>"
    r"|<K(\d+)>\s+(?:as\s+)?(?:large|big|high)\s+as\b"
)
_BEST = re.compile(
    r"\b(?:best|optimal|optimum|ideal|right)\s+(?:value\s+(?:of|for)\s+)?(?:the\s+)?<K(\d+)>"
    r"|\btune\s+(?:the\s+)?<K(\d+)>|\bwhich\s+<K(\d+)>[^<]*\b(?:best|better|most|highest)\b"
    r"|<K(\d+)>\s+(?:that|which)\s+(?:maximi[sz]es|gives\s+the\s+(?:highest|best)|works\s+best)"
)
_EFFECT = re.compile(
    r"\b(?:effect|impact|influence|sensitivity)\s+(?:of\s+)?(?:the\s+)?(?:changing\s+|varying\s+)?<K(\d+)>"
    r"|\bhow\s+(?:does|do)\s+(?:the\s+)?(?:changing\s+|varying\s+)?<K(\d+)>\s+(?:affect|change|influence|impact)"
    r"|\bdoes\s+(?:the\s+)?<K(\d+)>\s+(?:matter|affect|change|influence|impact)"
    r"|\b(?:vary|varying|sweep|sweeping)\s+(?:the\s+)?<K(\d+)>"
)
_EFFICIENT = re.compile(
    r"\b(?:efficient(?:ly)?|quick(?:ly)?|fast(?:er)?|sample[\s-]efficient|speed|rapid(?:ly)?)\b"
)
_ABS = re.compile(
    rf"(?:reward|accuracy|score|success\s+rate)\s*(?:of\s+)?(?:>=|at\s+least|above|over|of|=)?\s*{_FREE}{_NUM}(%?)"
)
_REL_WITHIN = re.compile(rf"within\s+{_NUM}\s*%\s+of\s+(?:the\s+)?(?:best|maximum|top|peak)")
_REL_OF = re.compile(rf"{_FREE}{_NUM}\s*%\s+of\s+(?:the\s+)?(?:best|maximum|top|peak)")
_STEPS = re.compile(
    rf"{_FREE}(\d+)\s+(?:total\s+)?(?:training\s+|optimi[sz]er\s+)?steps\b|\bsteps?\s*(?:=|:)\s*(\d+)\b"
)
_TASK_WORDS = {
    "arithmetic": ("arithmetic", "math", "maths", "sums", "addition", "aime"),
    "countdown": ("countdown",),
    "calculator": ("calculator", "tool use", "tool using"),
}
_MODEL_WORDS = {
    "smollm2-135m": ("smollm2 135m", "smollm2-135m", "smollm2", "smollm"),
    "tiny": ("tiny model", "model tiny"),
}


def _why(e: ValueError) -> str:
    """The human part of a (pydantic) validation error."""
    if isinstance(e, ValidationError):
        return "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
    return str(e)


def _normalise(text: str) -> str:
    t = text.lower().replace("_", " ").replace("≥", ">=").replace("–", "-").replace("—", " - ")
    return re.sub(r"\s+", " ", t).strip()


def _word(phrase: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + re.escape(phrase).replace(r"\ ", r"[\s-]+") + r"(?![\w-])")


def _choice_mentions(text: str, knob: Knob) -> list[tuple[int, str]]:
    """(position, value) of each of the knob's valid choices named in `text`."""
    out = []
    for v in knob.valid_choices():
        for m in _word(v.replace("_", " ")).finditer(text):
            out.append((m.start(), v))
    return sorted(out)


def _numbers(s: str) -> list[float]:
    return [float(x) for x in re.findall(_NUM, s)]


def _levels(segment: str) -> tuple[str, Any] | None:
    """A range ("range", (lo, hi)), a set ("set", [..]) or a single value ("single", x) in a segment."""
    segment = _ABS.sub(" ", _STEPS.sub(" ", segment))  # "in 20 steps", "reward 0.5" are not levels
    for pat in _SET:
        if m := pat.search(segment):
            return "set", _numbers(m.group(1))
    for pat in _RANGE:
        if m := pat.search(segment):
            return "range", (float(m.group(1)), float(m.group(2)))
    if m := _SINGLE.search(segment):
        return "single", float(m.group(1))
    return None


def _segments(text: str, mentions: list[tuple[int, int, Knob]]) -> list[tuple[Knob, str]]:
    """Each knob mention with the text that follows it up to the next mention."""
    out = []
    for i, (_s, e, k) in enumerate(mentions):
        nxt = mentions[i + 1][0] if i + 1 < len(mentions) else len(text)
        out.append((k, text[e:nxt]))
    return out


def _factor(knob: Knob, levels: tuple[str, Any] | None, assumptions: list[str], role: str) -> Factor:
    if levels is None or levels[0] == "single":
        if knob.kind == "choice":
            return Factor(key=knob.key)
        lo, hi = knob.default_range
        assumptions.append(f"no range given for the {role} variable {knob.name}; using {lo:g} to {hi:g}")
        return Factor(key=knob.key, low=lo, high=hi)
    if levels[0] == "set":
        return Factor(key=knob.key, values=levels[1])
    return Factor(key=knob.key, low=levels[1][0], high=levels[1][1])


def _split_secondary(norm: str, primary: tuple[int, int, Knob]) -> tuple[str, str | None]:
    """(main clause, secondary clause or None): a trailing "whether/does/depends on <variable> ..." part
    that names a variable other than the studied one."""
    for m in _TRIGGER.finditer(norm):
        if m.start() <= primary[0]:
            continue
        clause = norm[m.start() :]
        if any(k.key != primary[2].key for _s, _e, k in find_knob(clause)) and _CHANGE.search(clause):
            return norm[: m.start()].rstrip(" ,;.?"), clause
    return norm, None


def _task(norm: str, understood: dict, assumptions: list[str]) -> str | None:
    for task, words in _TASK_WORDS.items():
        for w in words:
            if _word(w).search(norm):
                if w != task:
                    assumptions.append(f"'{w}' is read as the built-in task {task!r}")
                understood["task"] = task
                return task
    return None


def parse_goal(text: str) -> Goal:
    """Parse a research goal; raises `GoalParseError` (a ValueError) saying what it understood otherwise."""
    norm = _normalise(text)
    understood: dict[str, Any] = {}
    assumptions: list[str] = []
    mentions = find_knob(norm)
    if not mentions and not _COMPARE.search(norm):
        raise GoalParseError("it names no variable to study", understood)

    # the shape is read with variable names masked, so "max response length" is not a "max ..." question
    masked, last = "", 0
    for i, (s, e, _k) in enumerate(mentions):
        masked += norm[last:s] + f"<K{i}>"
        last = e
    masked += norm[last:]
    shape, primary_idx = None, None
    for name, pat in (("minimum", _MIN), ("maximum", _MAX), ("best", _BEST), ("effect", _EFFECT)):
        if m := pat.search(masked):
            shape, primary_idx = name, int(next(g for g in m.groups() if g is not None))
            break
    if _COMPARE.search(norm) and shape not in ("minimum", "maximum"):
        shape = "compare"
    if shape is None:
        _task(norm, understood, [])
        understood["variables"] = [k.name for _s, _e, k in mentions]
        raise GoalParseError(
            "it asks no recognised question about them (smallest, largest, best, effect of, versus)",
            understood,
        )
    understood["shape"] = shape
    task = _task(norm, understood, assumptions)
    fixed: dict[str, Any] = {}
    for model, words in _MODEL_WORDS.items():
        if any(_word(w).search(norm) for w in words):
            fixed["swarm.model.name"] = model
            understood["model"] = model
            break

    if shape == "compare":
        factor, main, secondary_clause = _compare_factor(norm, mentions, understood)
    else:
        primary = mentions[primary_idx]
        main, secondary_clause = _split_secondary(norm, primary)
        main_mentions = [m for m in mentions if m[1] <= len(main)]
        understood["variable"] = primary[2].name
        segs = _segments(main, main_mentions)
        # the range may follow any mention of the variable ("smallest batch size ... (batch size 1 to 64)")
        levels = next((lv for k, seg in segs if k.key == primary[2].key and (lv := _levels(seg))), None)
        levels = levels or _levels(main[: primary[0]])
        try:
            factor = _factor(primary[2], levels, assumptions, "studied")
        except ValueError as e:
            raise GoalParseError(_why(e), understood) from None
        understood["range"] = factor.describe()
        for knob, seg in segs:
            if knob.key in (factor.key, "task") or knob.key in fixed:
                continue
            lv = _levels(seg)
            if lv is not None and lv[0] == "single" and knob.kind != "choice":
                try:
                    fixed[knob.key] = knob.coerce(lv[1])
                except ValueError as e:
                    raise GoalParseError(_why(e), understood) from None

    secondary = None
    if secondary_clause is not None:
        sk = next((k for _s, _e, k in find_knob(secondary_clause) if k.key != factor.key), None)
        if sk is not None:
            segs = dict((k.key, seg) for k, seg in _segments(secondary_clause, find_knob(secondary_clause)))
            try:
                secondary = _factor(sk, _levels(segs.get(sk.key, "")), assumptions, "secondary")
            except ValueError as e:
                raise GoalParseError(_why(e), understood) from None
            understood["secondary"] = secondary.describe()

    if task is None and factor.key != "task":
        task = "arithmetic"
        assumptions.append("no built-in task named; using arithmetic")
    studied = {factor.key} | ({secondary.key} if secondary else set())
    for knob in (get_knob("swarm.algorithm.policy_loss"), get_knob("swarm.algorithm.advantage")):
        named = {v for _p, v in _choice_mentions(norm, knob)}
        if knob.key not in studied and len(named) == 1:  # "... with gspo" fixes the loss
            fixed[knob.key] = named.pop()
    for key in studied:
        for req_key, req_val in get_knob(key).requires.items():
            fixed.setdefault(req_key, req_val)
    fixed.pop(factor.key, None)

    criterion = Criterion()
    if m := _ABS.search(norm):
        v = float(m.group(1)) / (100 if m.group(2) else 1)
        criterion = Criterion(kind="absolute", value=v)
    elif m := _REL_WITHIN.search(norm):
        criterion = Criterion(value=1 - float(m.group(1)) / 100)
    elif m := _REL_OF.search(norm):
        criterion = Criterion(value=float(m.group(1)) / 100)
    steps = None
    if m := _STEPS.search(norm):
        steps = int(m.group(1) or m.group(2))
    statistic = "auc" if _EFFICIENT.search(norm) else "final"
    if statistic == "auc":
        assumptions.append(
            "speed of learning ('efficiently', 'fastest') is scored by the area under the held-out accuracy "
            "curve (trapezoid over the evaluation steps, divided by the steps)"
        )
    try:
        return Goal(
            text=text,
            shape=shape,
            factor=factor,
            secondary=secondary,
            task=task or "arithmetic",
            fixed=fixed,
            statistic=statistic,
            criterion=criterion,
            steps=steps,
            assumptions=assumptions,
        )
    except ValueError as e:
        raise GoalParseError(_why(e), understood) from None


def _compare_factor(norm: str, mentions: list, understood: dict) -> tuple[Factor, str, str | None]:
    """The compared variable and values: named choices of one knob, or numbers after one numeric knob."""
    for knob in KNOBS:
        if knob.kind != "choice":
            continue
        named = list(dict.fromkeys(v for _p, v in _choice_mentions(norm, knob)))
        if len(named) >= 2:
            understood["variable"] = knob.name
            understood["values"] = named
            return Factor(key=knob.key, values=named), norm, None
    for _s, e, knob in mentions:
        if knob.kind == "choice":
            continue
        rest = _ABS.sub(" ", _STEPS.sub(" ", norm[e:]))
        nums = [float(x) for x in re.findall(_FREE + _NUM + _END, rest)]
        if len(nums) >= 2:
            understood["variable"] = knob.name
            try:
                return Factor(key=knob.key, values=list(dict.fromkeys(nums))), norm, None
            except ValueError as err:
                raise GoalParseError(_why(err), understood) from None
    raise GoalParseError("it compares things but names no two values of one variable", understood)
