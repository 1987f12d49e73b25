"""The offline, deterministic parser of research goals into a `Goal` (a3r.leader.goal_model, re-exported).

Shapes (`Goal.shape`):
- `minimum` / `maximum`: the smallest (largest) X that still achieves Y -- "find the smallest batch size
  that still trains arithmetic efficiently (1 to 64)", "what max tokens does countdown need: 32, 64 or
  128?" ("need", "enough", "how small can" ask for the least that suffices);
- `best`: the best X in a range or set -- "best learning rate for countdown between 1e-6 and 1e-4",
  "which learning rate trains arithmetic best: 3e-6, 1.5e-5 or 6e-5?" (three or more compared values are
  always a best-of question: that is how they are analysed);
- `effect`: the effect of X on Y -- "how does group size affect arithmetic?";
- `compare`: A versus B -- "gspo versus ppo_clip on countdown", "is GSPO better than GRPO?", "compare rank 4
  with rank 32", "does temperature 0.6 or 1.0 train countdown better?".
Values are the researcher's: two or more named values ("1, 2 and 4", "{1e-5, 1e-4}", "0.6 or 1.0",
"32/64/128") are exactly those values, never a sweep between them, and later stages add none in between
unless the goal asks to refine (`Goal.refine`); a sweep is written as one ("1 to 64", "1-64", "from 16 to
64", "between 1e-6 and 1e-4", or "[1e-6, 1e-4]", the closed interval of mathematics). Levels written in
another knob's unit are converted and said aloud ("16 episodes per batch" at group size 4 is batch size 4).
A secondary factor ("..., and whether max response length changes that") becomes a second variable that
is crossed with the first, and the question is answered at each of its levels; so does a second variable
given two or more levels in the sentence ("best lr (1e-6 to 1e-4) at 8 and 32 training steps"). Numbers
belong to the variable they are written with: those right before a variable's name or unit ("8 and 32
training steps") are its levels, not the previous variable's. Numbers it cannot attribute (a unit that
names no variable, "100 and 200 episodes"; a range and a separate set for one variable; levels for a third
variable) are refused by name, never guessed.

The parser is a set of regular expressions over a normalised sentence (typing slips read through by
`a3r.leader.goal_help`), not a language model: it answers exactly these shapes and says so. A goal it
cannot parse raises `GoalParseError` whose message states what it understood, what it did not, and the
working forms closest to the sentence. Numbers it reads (ranges, thresholds) are the researcher's; the LLM
policy produces the same `Goal` through a validated schema instead (`a3r.leader.goal_llm`).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from pydantic import ValidationError

from a3r.leader.goal_help import closest_forms, correct_spelling, unknown_variable
from a3r.leader.goal_model import Criterion, Factor, Goal, Shape
from a3r.leader.knobs import KNOBS, Knob, find_knob, get_knob, phrase_pattern

__all__ = ["FORMS", "Criterion", "Factor", "Goal", "GoalParseError", "named_numbers", "parse_goal"]

FORMS = (
    "find the smallest <variable> that still trains <task> (<low> to <high>)",
    "find the largest <variable> that still trains <task> [, and whether <variable> changes that]",
    "find the best <variable> for <task> between <low> and <high>   |   ... in {a, b, c}   |   "
    "... among a, b and c",
    "what is the effect of <variable> on <task>   |   how does <variable> affect <task>   |   "
    "does <variable> matter for <task>",
    "compare <variable> <a> with <variable> <b>   |   <A> versus <B> on <task>   |   is <A> better than <B>"
    "   |   does <variable> <a> or <b> train <task> better   (two values of one variable: gspo vs ppo_clip, "
    "rank 4 vs 32)",
)


class GoalParseError(ValueError):
    """The offline parser could not turn the sentence into a `Goal`; the message says what it understood,
    what it did not (`problem`), and the forms closest to the sentence that work (`closest`)."""

    def __init__(self, problem: str, understood: dict[str, Any], text: str = ""):
        self.problem, self.understood = problem, dict(understood)
        self.closest = closest_forms(text, self.understood) if text else []
        seen = ", ".join(f"{k}={v}" for k, v in understood.items()) or "nothing usable"
        variables = ", ".join(k.name for k in KNOBS)
        forms = "\n".join(f"  - {f}" for f in FORMS)
        near = "".join(f"\n  - {f}" for f in self.closest)
        super().__init__(
            f"cannot understand the goal: {problem}.\nUnderstood so far: {seen}.\n"
            + (f"Closest forms that work:{near}\n" if near else "")
            + f"Goals of these forms work:\n{forms}\nVariables: {variables}.\n"
            "Configure an LLM endpoint (A3R_LLM_BASE_URL, A3R_LLM_MODEL) for free-form goals."
        )


# -- the parser -----------------------------------------------------------------------------------------
_NUM = r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
_N = _NUM[1:-1]  # the same number, not captured
_FREE = r"(?<![\w.])"  # a number must stand alone: "smollm2-135m" holds no range
_END = r"(?!\w|\.\d)"  # ... and may end a sentence: "rank 32."
# levels of a variable, tried in this order: "between 1 and 4" is a range, not the pair {1, 4}
_BETWEEN = re.compile(rf"between\s+{_FREE}{_NUM}\s+and\s+{_NUM}{_END}")
_INTERVAL = re.compile(rf"\[\s*{_NUM}\s*,\s*{_NUM}\s*\]")  # [1e-6, 1e-4]: a closed interval, as in maths
_LIST = re.compile(
    rf"{_FREE}({_N}(?:\s*,\s*{_N})*\s*,?\s*(?:and|or|vs\.?|versus)\s+{_N}|{_N}(?:\s*(?:,|/|\bvs\.?|\bversus\b)\s*{_N})+)"
    rf"{_END}"
)
_SPAN = re.compile(rf"{_FREE}{_NUM}\s*(?:to|-|\.\.|through)\s*{_NUM}{_END}")
_SINGLE = re.compile(rf"^\s*(?:(?:set|fixed)\s+)?(?:=|:|of|is|at|to)?\s*{_FREE}{_NUM}{_END}")
_TRIGGER = re.compile(r"\b(?:whether|if|how|does|do)\b|\bdepend(?:s|ing)?\s+on\b")
_CHANGE = re.compile(r"\b(?:chang|affect|influenc|alter|shift|mov|matter|impact|modif|depend)\w*")
_COMPARE = re.compile(
    r"\b(?:versus|vs\.?|compar(?:e|es|ed|ing)|against|outperforms?)\b"
    r"|\b(?:better|worse|faster|slower|quicker)\s+than\b"
    r"|\bmore\s+(?:efficient|accurate|effective|stable)\s+than\b"
    r"|\bwhich\b.*\bor\b"
)
# "A or B" compares only when nothing else is asked: in "best lr, 1e-5 or 1e-4" it is a set
_OR = re.compile(r"\bor\b")
_OF = r"(?:(?:number|amount|count|value|setting|size)\s+of\s+(?:the\s+)?)?"  # "minimum number of <K>"
_MIN = re.compile(
    rf"\b(?:minimum|minimal|smallest|lowest|least|fewest|min)\s+(?:possible\s+|viable\s+|usable\s+)?{_OF}<K(\d+)>"
    r"|\bhow\s+(?:small|low|few)\s+(?:can|could|may|might)\s+(?:the\s+)?<K(\d+)>"
    r"|\bhow\s+(?:few|little|small\s+a|low\s+a)\s+<K(\d+)>"
    r"|<K(\d+)>\s+(?:as\s+)?(?:small|low)\s+as\b"
)
_MAX = re.compile(
    rf"\b(?:maximum|maximal|largest|highest|biggest|greatest|max|most)\s+(?:possible\s+|viable\s+|usable\s+)?{_OF}<K(\d+)>"
    r"|\bhow\s+(?:large|big|high|many)\s+(?:can|could|may|might)\s+(?:the\s+)?<K(\d+)>"
    r"|<K(\d+)>\s+(?:as\s+)?(?:large|big|high)\s+as\b"
)
_BEST = re.compile(
    r"\b(?:best|optimal|optimum|ideal|right|best\s+performing|best-performing)\s+(?:value\s+(?:of|for)\s+)?"
    rf"(?:the\s+)?(?:choice\s+of\s+(?:the\s+)?)?{_OF}<K(\d+)>"
    r"|\b(?:tune|optimi[sz]e)\s+(?:the\s+)?<K(\d+)>"
    r"|\b(?:what|which)\s+<K(\d+)>\s+(?:should|would|do|shall)\s+(?:i|we|you)\s+(?:use|pick|choose|take|go\s+with)"
    r"|\bwhich\s+(?:of\s+(?:the\s+|these\s+)?)?<K(\d+)>[^<]*\b(?:best|better|most|highest|fastest|quickest)\b"
    r"|\bwhich\s+of\s+(?:the\s+|these\s+)?<K(\d+)>"
    r"|<K(\d+)>\s+(?:that|which)\s+(?:maximi[sz]es|gives\s+the\s+(?:highest|best)|works\s+best)"
)
# "how many <K> does countdown need", "what max tokens is enough": the least that suffices, a minimum
_NEED = re.compile(
    r"<K(\d+)>[^<]*?\b(?:need|needs|needed|require|requires|required|enough|suffices?|sufficient)\b"
)
_EFFECT = re.compile(
    r"\b(?:effect|impact|influence|sensitivity)\s+(?:of\s+)?(?:the\s+)?(?:changing\s+|varying\s+)?<K(\d+)>"
    r"|\bhow\s+(?:much\s+)?(?:does|do)\s+(?:the\s+)?(?:changing\s+|varying\s+)?<K(\d+)>[^<]*?"
    r"\b(?:matter|affect|change|influence|impact)"
    r"|\b(?:does|do|whether)\s+(?:the\s+)?(?:choice\s+of\s+(?:the\s+)?)?<K(\d+)>\s+"
    r"(?:\([^)]*\)\s+)?(?:really\s+)?"
    r"(?:matters?|makes?\s+a\s+difference|affects?|changes?|influences?|impacts?)"
    r"|\bis\s+(?:the\s+)?<K(\d+)>\s+important"
    r"|\b(?:vary|varying|sweep|sweeping)\s+(?:the\s+)?<K(\d+)>"
    r"|<K(\d+)>\s+(?:sweep|scan|ablation)\b"
)
_EFFICIENT = re.compile(
    r"\b(?:(?:sample|compute)[\s-])?efficient(?:ly)?\b|\b(?:quick|fast)(?:er|est|ly)?\b"
    r"|\bspeed\b|\brapid(?:ly)?\b"
)
_ABS = re.compile(
    rf"(?:reward|accuracy|score|success\s+rate)\s*(?:of\s+)?(?:>=|at\s+least|above|over|of|=)?\s*{_FREE}{_NUM}(%?)"
)
_ABS_BEFORE = re.compile(rf"{_FREE}{_NUM}(%?)\s+(?:held[\s-]out\s+)?(?:reward|accuracy|success\s+rate)\b")
_REL_WITHIN = re.compile(rf"within\s+{_NUM}\s*%\s+of\s+(?:the\s+)?(?:best|maximum|top|peak)")
_REL_OF = re.compile(rf"{_FREE}{_NUM}\s*%\s+of\s+(?:the\s+)?(?:best|maximum|top|peak)")
_STEPS = re.compile(
    rf"{_FREE}(\d+)\s+(?:total\s+)?(?:training\s+|optimi[sz]er\s+)?steps\b|\bsteps?\s*(?:=|:)\s*(\d+)\b"
)
_SEEDS = re.compile(rf"{_FREE}\d+\s+(?:random\s+)?seeds?\b")
_NOT_LEVELS = (_STEPS, _ABS, _ABS_BEFORE, _REL_WITHIN, _REL_OF, _SEEDS)


class _Value(NamedTuple):
    """A choice value named in the sentence ("gspo", "full weights", "math")."""

    start: int
    end: int
    knob: Knob
    value: Any
    phrase: str
    stands_for: str | None  # the reason, when the phrase is another knob's value read as this choice


def _why(e: ValueError) -> str:
    """The human part of a (pydantic) validation error."""
    if isinstance(e, ValidationError):
        return "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
    return str(e)


def _normalise(text: str) -> str:
    t = text.lower().replace("_", " ").replace("≥", ">=").replace("–", "-").replace("—", " - ")
    t = t.replace("−", "-").replace("×", "x").replace("’", "'")
    t = re.sub(r"(?<![\w.])\.(\d)", r"0.\1", t)  # ".5" is 0.5
    t = re.sub(r"(\d(?:\.\d+)?)\s*x\s*10\s*\^\s*([-+]?\d+)", r"\1e\2", t)  # 3 x 10^-6 is 3e-6
    return re.sub(r"\s+", " ", t).strip()


def _inside_longer(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= start and end <= b and b - a > end - start for a, b in spans)


def _mentions(text: str) -> tuple[list[_Value], list[tuple[int, int, Knob]]]:
    """The choice values and the knob mentions in `text`, in order. A phrase inside a longer one is part of
    it: "lora" in "lora rank" names no value, "task" in "task count" (a pool policy) no task knob."""
    mentions = find_knob(text)
    named = {k.key for _s, _e, k in mentions}
    found = []
    for knob in KNOBS:
        phrases = [(p, v, None) for p, v in knob.value_phrases(knob.key in named)]
        phrases += [(p, v, why) for p, (v, why) in knob.stands_for.items()]
        for phrase, value, why in phrases:
            for m in phrase_pattern(phrase).finditer(text):
                found.append(_Value(m.start(), m.end(), knob, value, phrase, why))
    spans = [(s, e) for s, e, _k in mentions] + [(v.start, v.end) for v in found]
    values = sorted((v for v in found if not _inside_longer(v.start, v.end, spans)), key=lambda v: v.start)
    value_spans = [(v.start, v.end) for v in values]
    return values, [m for m in mentions if not _inside_longer(m[0], m[1], value_spans)]


def _distinct(values: list[_Value]) -> list[_Value]:
    """The first mention of each value, in the order named."""
    out: list[_Value] = []
    for v in sorted(values, key=lambda v: v.start):
        if all(v.value != w.value for w in out):
            out.append(v)
    return out


def _named(values: list[_Value], knob: Knob) -> list[Any]:
    """The knob's values named in the sentence by their own phrases, once each, in order."""
    return [v.value for v in _distinct([v for v in values if v.knob.key == knob.key and not v.stands_for])]


def _without_other_numbers(s: str) -> str:
    """`s` without numbers that are not levels: "in 20 steps", "accuracy 0.5", "within 5% of the best"."""
    for pat in _NOT_LEVELS:
        s = pat.sub(" ", s)
    return s


def _numbers(s: str) -> list[float]:
    return [float(x) for x in re.findall(_NUM, s)]


def _levels(segment: str) -> tuple[str, Any] | None:
    """A range ("range", (lo, hi)), a set ("set", [..]) or a single value ("single", x) in a segment."""
    s = _without_other_numbers(segment)
    ranged = _BETWEEN.search(s) or _INTERVAL.search(s) or _SPAN.search(s)
    listed = _LIST.search(s)
    if ranged and listed and (listed.end() <= ranged.start() or ranged.end() <= listed.start()):
        raise GoalParseError(
            f"it gives one variable both a range ({ranged.group(0).strip()}) and a set of values "
            f"({listed.group(0).strip()}) and cannot tell which is meant; write one, or name the variable "
            "each belongs to",
            {},
        )
    if m := _BETWEEN.search(s) or _INTERVAL.search(s):
        return "range", (float(m.group(1)), float(m.group(2)))
    if m := _LIST.search(s):  # named values are exactly those values: "1, 2 and 4", "{1e-5, 1e-4}"
        return "set", _numbers(m.group(1))
    if m := _SPAN.search(s):
        return "range", (float(m.group(1)), float(m.group(2)))
    if m := _SINGLE.search(s):
        return "single", float(m.group(1))
    return None


# numbers written just before a variable's name are its levels: "at 8 and 32 training steps"
_BEFORE = re.compile(rf"(?:{_SPAN.pattern}|{_LIST.pattern}|{_FREE}{_N}{_END})\s*$")


def _before(text: str, start: int) -> int:
    """Where the numbers written right before the mention at `start` begin (`start` if there are none)."""
    m = _BEFORE.search(text[:start])
    return m.start() if m else start


# knob names that are also units: after numbers they take no more ("in 20 steps: 1e-5, 3e-5 or 1e-4")
_UNITS = ("steps", "tokens")


def _unit_span(text: str, mention: tuple[int, int, Knob]) -> tuple[int, int] | None:
    """The span of numbers-and-unit ("20 steps") when the mention is a bare unit written after numbers."""
    s, e, _k = mention
    b = _before(text, s)
    return (b, e) if b < s and text[s:e] in _UNITS else None


def _segments(text: str, mentions: list[tuple[int, int, Knob]]) -> list[tuple[Knob, str]]:
    """Each knob mention with its text: the numbers written right before it ("8 and 32 training steps"),
    then the text that follows it up to the numbers of the next mention, or the next mention. A bare unit
    after numbers ("in 20 steps") takes only those numbers, and the text before it runs on past them. A
    numeric knob's text runs over choice mentions, which take no numbers ("lr for the calculator task,
    from 3e-6 to 1e-4")."""
    out = []
    for i, (s, e, k) in enumerate(mentions):
        if k.kind != "choice" and (unit := _unit_span(text, mentions[i])):
            out.append((k, text[unit[0] : s]))
            continue
        later = mentions[i + 1 :]
        if k.kind != "choice":
            later = [m for m in later if m[2].kind != "choice"]
        cuts = []
        for m in later:
            if k.kind == "choice" or (span := _unit_span(text, m)) is None:
                break
            cuts.append(span)
        nxt = later[len(cuts)] if len(cuts) < len(later) else None
        end = max(e, _before(text, nxt[0])) if nxt else len(text)
        body, last = "", e
        for a, b in cuts:
            body, last = body + text[last:a] + " ", b
        lead = text[_before(text, s) : s] if k.kind != "choice" else ""
        out.append((k, lead + " " + body + text[last:end]))
    return out


def _factor(
    knob: Knob,
    levels: tuple[str, Any] | None,
    named: list[Any],
    role: str,
    understood: dict,
    assumptions: list[str],
) -> Factor:
    """A studied or secondary variable: the choices or levels named, else all choices or the default range."""
    try:
        if knob.kind == "choice":
            return Factor(key=knob.key, values=named) if len(named) >= 2 else Factor(key=knob.key)
        if levels is None or levels[0] == "single":
            lo, hi = knob.default_range
            assumptions.append(f"no range given for the {role} variable {knob.name}; using {lo:g} to {hi:g}")
            return Factor(key=knob.key, low=lo, high=hi)
        if levels[0] == "set":
            return Factor(key=knob.key, values=levels[1])
        return Factor(key=knob.key, low=levels[1][0], high=levels[1][1])
    except ValueError as e:
        raise GoalParseError(_why(e), understood) from None


def _masked(norm: str, mentions: list[tuple[int, int, Knob]]) -> str:
    """The sentence with each variable name replaced by <Ki>, so "max response length" asks no "max"."""
    masked, last = "", 0
    for i, (s, e, _k) in enumerate(mentions):
        masked += norm[last:s] + f"<K{i}>"
        last = e
    return masked + norm[last:]


def _shape(norm: str, mentions: list[tuple[int, int, Knob]]) -> tuple[Shape | None, tuple | None, int]:
    """(shape, the studied variable's mention or None for a comparison, where the question's cue starts)."""
    shape, primary = None, None
    masked = _masked(norm, mentions)
    for name, pat in (("minimum", _MIN), ("maximum", _MAX), ("best", _BEST), ("minimum", _NEED), ("effect", _EFFECT)):
        if m := pat.search(masked):
            shape, primary = name, mentions[int(next(g for g in m.groups() if g is not None))]
            break
    cue = _COMPARE.search(norm) or (_OR.search(norm) if shape is None else None)
    if cue is not None and shape not in ("minimum", "maximum"):
        return "compare", None, cue.start()
    return shape, primary, primary[0] if primary else 0


def _split_secondary(norm: str, after: int, studied_key: str | None) -> tuple[str, str | None]:
    """(main clause, secondary clause or None): a "whether/does/depends on <variable> ..." part after the
    question's start that names a variable other than the studied one."""
    for m in _TRIGGER.finditer(norm):
        if m.start() <= after:
            continue
        clause = norm[m.start() :]
        if any(k.key != studied_key for _s, _e, k in _mentions(clause)[1]) and _CHANGE.search(clause):
            return norm[: m.start()].rstrip(" ,;.?"), clause
    return norm, None


def _task(values: list[_Value], understood: dict, assumptions: list[str]) -> str | None:
    """The first built-in task named, by name or by a word for it ("math", "aime")."""
    for v in values:
        if v.knob.key == "task":
            if v.phrase != v.value:
                assumptions.append(f"'{v.phrase}' is read as the built-in task {v.value!r}")
            understood["task"] = v.value
            return v.value
    return None


def _studied_factor(
    main: str, primary: tuple, mentions: list, values: list[_Value], understood: dict, assumptions: list[str]
) -> Factor:
    """The variable a minimum/maximum/best/effect question studies, with its range, set or choices."""
    knob = primary[2]
    understood["variable"] = knob.name
    segs = _segments(main, mentions)
    # the range may follow any mention of the variable ("smallest batch size ... (batch size 1 to 64)")
    try:
        levels = next((lv for k, seg in segs if k.key == knob.key and (lv := _levels(seg))), None)
        levels = levels or _levels(main[: primary[0]])
    except GoalParseError as e:  # say which variable got both a range and a set
        raise GoalParseError(e.problem.replace("one variable", knob.name, 1), understood) from None
    if levels is not None and levels[0] == "set" and (m := _LEADING.search(main[: primary[0]])):
        levels = ("set", list(dict.fromkeys([float(m.group(1)), *levels[1]])))
    phrase = main[primary[0] : primary[1]]
    if levels is not None and (per := _per(knob, phrase)) is not None:
        levels = _divided(knob, phrase, per, levels, main, mentions, understood, assumptions)
    factor = _factor(knob, levels, _named(values, knob), "studied", understood, assumptions)
    understood["range"] = factor.describe()
    return factor


_LEADING = re.compile(rf"{_FREE}{_NUM}\s*$")  # a number written just before the variable: "16 max tokens"


def _per(knob: Knob, phrase: str) -> Knob | None:
    """The knob whose value the levels of `phrase` are a multiple of ("episodes per batch": group size)."""
    key = knob.per.get(" ".join(re.split(r"[\s_-]+", phrase)))
    return get_knob(key) if key else None


def _divided(
    knob: Knob,
    phrase: str,
    per: Knob,
    levels: tuple[str, Any],
    main: str,
    mentions: list,
    understood: dict,
    assumptions: list[str],
) -> tuple[str, Any]:
    """Levels named in `phrase`'s unit ("16 episodes per batch") as levels of `knob` (batch size 4 at group
    size 4): divided by the goal's own value of `per`, else the engine default; said aloud."""
    from engine.config import SwarmConfig

    fixed = next(
        (lv[1] for k, seg in _segments(main, mentions) if k.key == per.key and (lv := _levels(seg)) and lv[0] == "single"),
        None,
    )
    n = fixed if fixed is not None else getattr(SwarmConfig().pool, per.key.rsplit(".", 1)[-1])
    kind, raw = levels
    nums = [raw] if kind == "single" else list(raw)
    if any(x % n for x in nums):
        raise GoalParseError(
            f"'{phrase}' counts {knob.name} x {per.name} ({_g(n)}), and {', '.join(_g(x) for x in nums)} "
            f"are not all multiples of {_g(n)}; name the {knob.name} (tasks per step) instead, or a "
            f"{per.name} that divides them",
            understood,
        )
    assumptions.append(
        f"'{phrase}' is {knob.name} x {per.name}: {', '.join(_g(x) for x in nums)} episodes at {per.name} "
        f"{_g(n)} are {knob.name} {', '.join(_g(x / n) for x in nums)}"
    )
    out = [x / n for x in nums]
    return kind, out[0] if kind == "single" else (out if kind == "set" else tuple(out))


def _g(x: float) -> str:
    """A number as a researcher writes it: 16, 1e-05."""
    return f"{x:g}"


def _compared_numbers(main: str, mentions: list) -> tuple[Knob, list[float]] | None:
    """The first numeric variable with two or more numbers after its mentions (or, named first, before it)."""
    segs = _segments(main, mentions)
    for i, (knob, _seg) in enumerate(segs):
        if knob.kind == "choice":
            continue
        text = " ".join(seg for k, seg in segs if k.key == knob.key)
        if i == 0:  # "is 8 or 32 the better batch size"
            text = main[: mentions[0][0]] + " " + text
        found = re.findall(_FREE + _NUM + _END, _without_other_numbers(text))
        nums = list(dict.fromkeys(float(x) for x in found))
        if len(nums) >= 2:
            return knob, nums
    return None


def _compare_factor(
    main: str, mentions: list, values: list[_Value], understood: dict, assumptions: list[str]
) -> Factor:
    """The compared variable and exactly the values named, in the order named: two choices of one knob,
    else one choice and another knob's value that stands for a second one ("gspo" vs "grpo"), else the
    numbers after one numeric variable ("rank 4 with rank 32")."""
    own: dict[str, list[_Value]] = {}
    for v in values:
        if not v.stands_for:
            own.setdefault(v.knob.key, []).append(v)
    own = {k: _distinct(vs) for k, vs in own.items()}
    direct = [vs for vs in own.values() if len(vs) >= 2]
    # only a knob with a value of its own named takes another knob's value as its second
    stood = [_distinct(vs + [v for v in values if v.knob.key == k and v.stands_for]) for k, vs in own.items()]
    if candidates := direct or [vs for vs in stood if len(vs) >= 2]:
        named_keys = {k.key for _s, _e, k in mentions}
        # the variable the sentence names wins, else the one whose values come first
        group = min(candidates, key=lambda vs: (vs[0].knob.key not in named_keys, vs[0].start))
        assumptions += [
            f"'{v.phrase}' is compared as {v.knob.name} {v.value}: {v.stands_for}"
            for v in group
            if v.stands_for
        ]
        return _compared(group[0].knob, [v.value for v in group], understood)
    if numeric := _compared_numbers(main, mentions):
        knob, nums = numeric
        phrase = next(main[a:b] for a, b, k in mentions if k.key == knob.key)
        if (per := _per(knob, phrase)) is not None:
            nums = _divided(knob, phrase, per, ("set", nums), main, mentions, understood, assumptions)[1]
        return _compared(knob, nums, understood)
    seen = [
        f"{vs[0].phrase} ({vs[0].knob.name})"
        for k, vs in own.items()
        if k not in ("task", "swarm.model.name")
    ]
    if len(seen) >= 2:
        understood["values"] = seen
        raise GoalParseError(
            f"it names values of different variables ({', '.join(seen)}); "
            "a comparison needs two values of one",
            understood,
        )
    if variables := [k.name for _s, _e, k in mentions if k.key != "task"]:
        understood["variables"] = variables
    raise GoalParseError("it compares things but names no two values of one variable", understood)


def _compared(knob: Knob, named: list[Any], understood: dict) -> Factor:
    understood["variable"] = knob.name
    understood["values"] = named
    try:
        return Factor(key=knob.key, values=named)
    except ValueError as e:
        raise GoalParseError(_why(e), understood) from None


def _secondary(clause: str | None, factor: Factor, understood: dict, assumptions: list[str]) -> Factor | None:
    """The variable of the "and whether <variable> changes that" clause, with its own levels."""
    if clause is None:
        return None
    values, mentions = _mentions(clause)
    knob = next((k for _s, _e, k in mentions if k.key != factor.key), None)
    if knob is None:
        return None
    seg = next(seg for k, seg in _segments(clause, mentions) if k.key == knob.key)
    secondary = _factor(knob, _levels(seg), _named(values, knob), "secondary", understood, assumptions)
    understood["secondary"] = secondary.describe()
    return secondary


def _refuse_two_sided(main: str, mentions: list, studied_key: str, understood: dict) -> None:
    """Refuse numbers on both sides of a variable the goal does not study ("with 32 max tokens between 1e-6
    and 1e-4"): which side is its value and which the studied variable's, the sentence does not say."""
    for (s, e, k), (_k, seg) in zip(mentions, _segments(main, mentions), strict=True):
        lead = main[_before(main, s) : s]
        if not lead or k.kind == "choice" or k.key == studied_key or main[s:e] in _UNITS:
            continue
        if (lv := _levels(seg[len(lead) :])) is not None:  # the segment is lead, a space, then the rest
            more = _g(lv[1]) if lv[0] == "single" else _g_levels(lv)
            raise GoalParseError(
                f"'{lead.strip()} {main[s:e]}' is followed by more numbers ({more}), and it cannot tell which "
                f"belong to {k.name}; write {k.name} once with its values",
                understood,
            )


def _crossed(
    main: str,
    mentions: list,
    factor: Factor,
    secondary: Factor | None,
    understood: dict,
    assumptions: list[str],
) -> Factor | None:
    """A second numeric variable given two or more levels in the main clause ("best lr (1e-6 to 1e-4) at 8
    and 32 training steps"): crossed with the studied one as the secondary variable, said aloud. Levels for
    a third variable are refused, never dropped."""
    others = {}
    for knob, seg in _segments(main, mentions):
        if knob.kind != "choice" and knob.key != factor.key and (lv := _levels(seg)) and lv[0] != "single":
            others.setdefault(knob.key, (knob, lv))
    if not others:
        return None
    named = [f"{k.name} ({_g_levels(lv)})" for k, lv in others.values()]
    if len(others) > 1 or secondary is not None:
        if secondary is not None:
            named.insert(0, secondary.describe())
        raise GoalParseError(
            f"it gives levels to more than one variable besides {factor.name} ({', '.join(named)}); "
            "a goal studies one variable and at most one second factor",
            understood,
        )
    knob, lv = next(iter(others.values()))
    crossed = _factor(knob, lv, [], "secondary", understood, assumptions)
    understood["secondary"] = crossed.describe()
    assumptions.append(
        f"{crossed.describe()} is a second factor: the question is answered at each of its levels"
    )
    return crossed


def _g_levels(levels: tuple[str, Any]) -> str:
    kind, raw = levels
    return " to ".join(_g(x) for x in raw) if kind == "range" else ", ".join(_g(x) for x in raw)


# numbers in a unit that is no variable ("with 100 and 200 episodes"): whose levels they are is unknown
_UNIT = re.compile(
    rf"(?:{_LIST.pattern}|{_SPAN.pattern})\s+(?:total\s+)?(episodes?|rollouts?|samples?|completions?|generations?|"
    r"prompts?|questions?|tasks?|epochs?|iterations?|tokens?|steps?)\b"
)


def _refuse_unattributed(main: str, mentions: list, understood: dict) -> None:
    """Refuse two or more numbers written in a unit that names no variable, rather than give them to one."""
    masked = _masked(main, mentions)
    if m := _UNIT.search(_without_other_numbers(masked)):
        raise GoalParseError(
            f"'{m.group(0).strip()}' gives values in {m.group(m.lastindex)!r}, which names no variable it "
            "knows, so it cannot tell which variable they belong to; name it (e.g. 'episodes per batch', "
            "'training steps', 'max tokens')",
            understood,
        )


def _fixed(
    main: str, mentions: list, values: list[_Value], studied: set[str], understood: dict
) -> dict[str, Any]:
    """Settings every arm shares: one number after a variable ("group size 8") and a choice named alone
    ("using gspo", "with smollm2", "without lora"); two named values of an unstudied variable fix nothing."""
    fixed: dict[str, Any] = {}
    for knob, seg in _segments(main, mentions):
        if knob.kind == "choice" or knob.key in studied or knob.key in fixed:
            continue
        lv = _levels(seg)
        if lv is not None and lv[0] == "single":
            try:
                fixed[knob.key] = knob.coerce(lv[1])
            except ValueError as e:
                raise GoalParseError(_why(e), understood) from None
    # a mention a studied variable claims as one of its values ("gspo" against "hacpo") fixes nothing else
    stood = {(v.start, v.end) for v in values if v.stands_for and v.knob.key in studied and v.knob.claims_stand_ins}
    for knob in KNOBS:
        named = _named([v for v in values if (v.start, v.end) not in stood], knob)
        if knob.key not in studied and knob.key != "task" and len(named) == 1:
            fixed[knob.key] = named[0]
    return fixed


def _add_requirements(studied: set[str], fixed: dict[str, Any], understood: dict) -> None:
    """Fix the settings the studied and fixed variables need (LoRA on for a LoRA rank); refuse conflicts."""
    for key in [*studied, *fixed]:
        knob = get_knob(key)
        for req_key, req_value in knob.requires.items():
            if req_key in studied:
                if key in studied:
                    raise GoalParseError(
                        f"{knob.name} needs {req_key}={req_value}, which the goal varies", understood
                    )
                continue  # "does LoRA matter, with rank 8": the arms without LoRA ignore the rank
            if fixed.setdefault(req_key, req_value) != req_value:
                raise GoalParseError(
                    f"{knob.name} needs {req_key}={req_value}, but the goal sets {fixed[req_key]}", understood
                )


def _criterion(norm: str) -> Criterion:
    """The researcher's threshold ("accuracy at least 0.5", "within 5% of the best"), else the default."""
    if m := _ABS.search(norm) or _ABS_BEFORE.search(norm):
        return Criterion(kind="absolute", value=float(m.group(1)) / (100 if m.group(2) else 1))
    if m := _REL_WITHIN.search(norm):
        return Criterion(value=1 - float(m.group(1)) / 100)
    if m := _REL_OF.search(norm):
        return Criterion(value=float(m.group(1)) / 100)
    return Criterion()


def named_numbers(text: str) -> list[float]:
    """Every number the sentence names, read as the parser reads them (".5" is 0.5, "3 x 10^-6" is 3e-6)."""
    return _numbers(_normalise(text))


def parse_goal(text: str) -> Goal:
    """Parse a research goal; raises `GoalParseError` (a ValueError) saying what it understood otherwise,
    what it did not, and the forms closest to the sentence that work."""
    try:
        return _parse(text)
    except GoalParseError as e:
        raise GoalParseError(e.problem, e.understood, text) from None


# three or more values "under which" (or a superlative) ask for the best of them, not a pairwise comparison
_WHICH_BEST = re.compile(r"\b(?:which|best|fastest|quickest|optimal|highest)\b")
_REFINE = re.compile(
    r"\b(?:refine|refining|in[\s-]between|values?\s+between\s+(?:them|those|these)|narrow(?:\s+it)?\s+down|"
    r"zoom\s+in|finer\s+grid|fine[\s-]grained)\b"
)


def _parse(text: str) -> Goal:
    understood: dict[str, Any] = {}
    assumptions: list[str] = []
    norm, fixes = correct_spelling(_normalise(text))
    assumptions += [f"read '{wrong}' as '{right}'" for wrong, right in fixes]
    values, mentions = _mentions(norm)
    task = _task(values, understood, assumptions)
    shape, primary, cue = _shape(norm, mentions)
    if not mentions and all(v.knob.key == "task" for v in values):
        unknown = unknown_variable(norm)
        raise GoalParseError(
            "it names no variable to study" + (f": {unknown}" if unknown else ""),
            understood,
        )
    if shape is None:
        understood["variables"] = [k.name for _s, _e, k in mentions]
        raise GoalParseError(
            "it asks no recognised question about them (smallest, largest, best, effect of, versus, A or B, "
            "which of a, b and c, how many ... does it need)",
            understood,
        )
    understood["shape"] = shape
    main, clause = _split_secondary(norm, cue, primary[2].key if primary else None)
    main_mentions = [m for m in mentions if m[1] <= len(main)]
    main_values = [v for v in values if v.end <= len(main)]
    _refuse_unattributed(main, main_mentions, understood)
    if shape == "compare":
        factor = _compare_factor(main, main_mentions, main_values, understood, assumptions)
        if len(factor.values or []) >= 3:  # which of three or more is best: analysed (and so named) as best
            shape = understood["shape"] = "best"
            if not _WHICH_BEST.search(main):
                assumptions.append(
                    f"{len(factor.values)} {factor.name} values are compared: the question is which is best"
                )
    else:
        factor = _studied_factor(main, primary, main_mentions, main_values, understood, assumptions)
    secondary = _secondary(clause, factor, understood, assumptions)
    _refuse_two_sided(main, main_mentions, factor.key, understood)
    secondary = _crossed(main, main_mentions, factor, secondary, understood, assumptions) or secondary
    studied = {factor.key} | ({secondary.key} if secondary else set())
    fixed = _fixed(main, main_mentions, values, studied, understood)
    if fixed:
        understood["fixed"] = dict(fixed)
    _add_requirements(studied, fixed, understood)
    if task is None and factor.key != "task":
        task = "arithmetic"
        assumptions.append("no built-in task named; using arithmetic")
    statistic = "auc" if _EFFICIENT.search(norm) else "final"
    if statistic == "auc":
        assumptions.append(
            "speed of learning ('efficiently', 'fastest') is scored by the area under the held-out accuracy "
            "curve (trapezoid over the evaluation steps, divided by the steps)"
        )
    steps = None
    if m := _STEPS.search(norm):
        steps = int(m.group(1) or m.group(2))
    if "swarm.training.max_steps" in studied:
        steps = None  # "10 or 20 training steps" are the levels, not the run length
    elif "swarm.training.max_steps" in fixed:  # "max total_training_steps: 60" is the run length
        steps = steps or fixed["swarm.training.max_steps"]
        del fixed["swarm.training.max_steps"]
    refine = factor.values is not None and factor.knob.kind != "choice" and bool(_REFINE.search(norm))
    if refine:
        assumptions.append(f"values between the named {factor.name} values may be added ('refine')")
    try:
        return Goal(
            text=text,
            shape=shape,
            factor=factor,
            secondary=secondary,
            task=task or "arithmetic",
            fixed=fixed,
            statistic=statistic,
            criterion=_criterion(norm),
            steps=steps,
            refine=refine,
            assumptions=assumptions,
        )
    except ValueError as e:
        raise GoalParseError(_why(e), understood) from None
