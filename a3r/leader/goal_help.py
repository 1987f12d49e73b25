"""Help for the offline goal parser: spelling slips it can read through, and, when it refuses a goal, the
words it did not understand and the working forms closest to the sentence.

Spelling: a word of six or more letters that is not in the parser's vocabulary (the knobs' names, aliases and
value phrases, the task names, the question words) but is one typing slip (a letter dropped, doubled or
added, two neighbours swapped) away from one that is, is read as that word ("learnign" as "learning",
"aritmetic" as "arithmetic"); a changed letter is not a slip ("shaping" stays "shaping"), and every
correction is said aloud as an assumption. Short words and numbers are never touched: "lr", "bs", "1e-5" mean what they say.

Closest forms: the forms of `goals.FORMS`, filled in with the variable and task the sentence did name
(or ones it nearly named), ranked by their similarity to the sentence (`difflib`). They are examples that
parse, not guesses at the meaning: a test checks that each one does.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import Any

from a3r.leader.knobs import KNOBS, get_knob

__all__ = ["closest_forms", "correct_spelling", "unknown_variable"]

# the words of the question shapes (goals._MIN, _BEST, _COMPARE, ...) and of the tasks and criteria
_QUESTION_WORDS = """smallest largest minimum maximum minimal maximal lowest highest fewest biggest greatest
best optimal optimum ideal effect impact influence sensitivity compare compared comparing versus better worse
faster slower quicker fastest quickest efficient efficiently between through among which whether matter
matters affect affects change changes influences depends depend still trains train training learns
learning accuracy reward success needed needs enough suffices sufficient require requires arithmetic countdown
calculator refine values value setting number""".split()
_MIN_LEN = 6  # shorter words are left alone: too many near neighbours
_CUTOFF = 0.85


@cache
def _vocabulary() -> frozenset[str]:
    words = set(_QUESTION_WORDS)
    for k in KNOBS:
        phrases = [k.name.lower(), *k.aliases, *k.value_names, *k.stands_for]
        phrases += [str(c).replace("_", " ") for c in k.valid_choices() if isinstance(c, str)]
        for p in phrases:
            words.update(re.findall(r"[a-z]+", p.lower()))
    return frozenset(w for w in words if len(w) >= _MIN_LEN)


def correct_spelling(norm: str) -> tuple[str, list[tuple[str, str]]]:
    """`norm` (a normalised goal) with near-miss words replaced by the vocabulary word they nearly are,
    and the (wrong, right) pairs replaced."""
    vocab = _vocabulary()
    fixes: list[tuple[str, str]] = []

    def fix(m: re.Match[str]) -> str:
        word = m.group(0)
        if len(word) < _MIN_LEN or word in vocab:
            return word
        near = [w for w in difflib.get_close_matches(word, vocab, n=3, cutoff=_CUTOFF) if _slip(word, w)]
        if not near or _inflection(word, near[0]):
            return word
        fixes.append((word, near[0]))
        return near[0]

    return re.sub(r"(?<![\w.-])[a-z]+(?![\w-])", fix, norm), fixes


def _slip(word: str, target: str) -> bool:
    """`word` is `target` with one letter dropped, doubled or added, or two neighbours swapped: the slips
    of typing. A changed letter is not one ("shaping" is a word, not a slip for "sharing")."""
    if len(word) == len(target):
        diff = [i for i, (a, b) in enumerate(zip(word, target, strict=True)) if a != b]
        return (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and word[diff[0]] == target[diff[1]]
            and word[diff[1]] == target[diff[0]]
        )
    short, long_ = sorted((word, target), key=len)
    return len(long_) - len(short) == 1 and any(
        long_[:i] + long_[i + 1 :] == short for i in range(len(long_))
    )


def _inflection(word: str, near: str) -> bool:
    """ "trained" for "train", "changed" for "change": another form of a word, not a slip."""
    return word.startswith(near) or near.startswith(word)


_UNKNOWN = re.compile(
    r"\b(?:smallest|largest|minimum|maximum|lowest|highest|best|optimal|effect\s+of|impact\s+of|which|"
    r"how\s+does|does|tune|compare)\s+(?:the\s+|a\s+)?([a-z][a-z -]{2,40}?)"
    r"(?=\s+(?:that|for|on|in|matter|matters|affect|affects|change|changes|is|are|trains|train|between|from|"
    r"works|gives|to|with|versus|vs)\b|[?,.:;]|$)"
)


def unknown_variable(norm: str) -> str:
    """What the sentence seems to vary that is no known variable, with the nearest variable names."""
    m = _UNKNOWN.search(norm)
    if m is None:
        return ""
    phrase = m.group(1).strip()
    names = sorted({a for k in KNOBS for a in (k.name.lower(), *k.aliases)})
    near = difflib.get_close_matches(phrase, names, n=3, cutoff=0.5)
    said = f"'{phrase}' is not a variable it knows"
    return said + (f" (nearest: {', '.join(near)})" if near else "")


# concrete instances of goals.FORMS: {v} a variable, {t} a task, {a} {b} {c} values, {lo} {hi} a range
_TEMPLATES = (
    "find the smallest {v} that still trains {t} ({lo} to {hi})",
    "what {v} does {t} need: {a}, {b} or {c}?",
    "find the largest {v} that still trains {t} ({lo} to {hi})",
    "find the best {v} for {t} between {lo} and {hi}",
    "which {v} trains {t} best: {a}, {b} or {c}?",
    "what is the effect of {v} on {t}",
    "does {v} matter for {t}?",
    "compare {v} {a} with {v} {b} on {t}",
    "is {v} {a} better than {b} on {t}?",
)


def _example_values(key: str) -> dict[str, str]:
    knob = get_knob(key)
    lo, hi = knob.default_range or (1, 8)
    if knob.kind == "int":
        mids = [int(lo), max(int(lo) + 1, int((lo * hi) ** 0.5)), int(hi)]
    elif knob.scale == "log":
        mids = [lo, (lo * hi) ** 0.5, hi]
    else:
        mids = [lo, (lo + hi) / 2, hi]
    a, b, c = (f"{float(x):.2g}" if knob.kind == "float" else str(x) for x in mids)
    return {"lo": f"{lo:g}", "hi": f"{hi:g}", "a": a, "b": b, "c": c}


def closest_forms(text: str, understood: dict[str, Any], n: int = 3) -> list[str]:
    """Up to `n` goals that parse, in the forms closest to `text`, with the variable and task it named."""
    variable = understood.get("variable") or next(iter(understood.get("variables") or []), None)
    if variable is None:
        names = sorted({a for k in KNOBS if k.kind != "choice" for a in (k.name.lower(), *k.aliases)})
        words = re.findall(r"[a-z]+(?:\s+[a-z]+)?", text.lower())
        near = [m for w in words for m in difflib.get_close_matches(w, names, n=1, cutoff=0.75)]
        variable = near[0] if near else "batch size"
    try:
        knob = get_knob(variable)
    except KeyError:
        knob = get_knob("batch size")
    if knob.kind == "choice":  # the numeric forms need a numeric variable; a choice is compared by name
        knob = get_knob("batch size")
    task = understood.get("task") or "arithmetic"
    filled = [t.format(v=knob.name.lower(), t=task, **_example_values(knob.key)) for t in _TEMPLATES]
    return sorted(filled, key=lambda f: -difflib.SequenceMatcher(None, text.lower(), f).ratio())[:n]
