"""Rule reward of one description: the share of the word's hint features it mentions (1 at two hints;
"flowing" counts for "flows"), 0 if it says the secret word (the prompt contains it, so echoing the prompt
scores 0), and 0 if it copies another player's description (a decoy) instead of describing.
"""

import re

# words every description shares; copying is judged on the rest
STOP = {"it", "is", "a", "an", "the", "and", "or", "of", "on", "in", "with", "this", "that", "very", "something",
        "thing", "you", "can", "my", "its", "to", "be", "are", "often", "sometimes", "mostly", "when", "think"}
SUFFIXES = ("ing", "es", "ed", "s", "y", "e")


def _words(text):
    return set(re.findall(r"[a-z]+", text.lower())) - STOP


def stem(word):
    """The word less one common ending, if at least three letters remain: flows, flowing -> flow."""
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def score(task, response):
    words = _words(response)
    if not words or task["word"].lower() in words or task["word"].lower() + "s" in words:
        return {"description": 0.0}
    for other in task.get("decoys", []):
        theirs = _words(other)
        if theirs and len(words & theirs) / len(theirs) >= 0.6:
            return {"description": 0.0}
    said = {stem(w) for w in words}
    hits = sum(1 for h in task["hints"] if stem(h) in said)
    return {"description": min(1.0, hits / 2)}
