"""Rule reward of one description: the share of the word's hint features it mentions (1 at two hints),
0 if it says the secret word (the prompt contains it, so echoing the prompt scores 0), and 0 if it
copies another player's description (a decoy) instead of describing.
"""

import re

# words every description shares; copying is judged on the rest
STOP = {"it", "is", "a", "an", "the", "and", "or", "of", "on", "in", "with", "this", "that", "very", "something",
        "thing", "you", "can", "my", "its", "to", "be", "are"}


def _words(text):
    return set(re.findall(r"[a-z]+", text.lower())) - STOP


def score(task, response):
    words = _words(response)
    if not words or task["word"].lower() in words or task["word"].lower() + "s" in words:
        return {"description": 0.0}
    for other in task.get("decoys", []):
        theirs = _words(other)
        if theirs and len(words & theirs) / len(theirs) >= 0.6:
            return {"description": 0.0}
    hits = sum(1 for h in task["hints"] if h in words)
    return {"description": min(1.0, hits / 2)}
