"""Mock dataset: civilian/spy word pairs with hint features, several player counts, disjoint test words."""

PAIRS = [
    ("apple", ["red", "fruit", "tree", "sweet", "round"], "pear", ["green", "fruit", "tree", "juicy"]),
    ("cat", ["pet", "purrs", "whiskers", "fur"], "dog", ["pet", "barks", "loyal", "fur"]),
    ("coffee", ["hot", "drink", "bitter", "morning"], "tea", ["hot", "drink", "leaves", "cup"]),
    ("piano", ["keys", "music", "black", "white"], "guitar", ["strings", "music", "wood"]),
    ("sun", ["hot", "bright", "sky", "day"], "moon", ["night", "sky", "bright", "round"]),
    ("train", ["rails", "travel", "fast", "station"], "bus", ["road", "travel", "seats", "stop"]),
    ("river", ["water", "flows", "long", "fish"], "lake", ["water", "still", "fish", "shore"]),
    ("book", ["pages", "read", "story", "paper"], "magazine", ["pages", "read", "glossy", "monthly"]),
    ("rose", ["flower", "red", "thorns", "smell"], "tulip", ["flower", "spring", "petals"]),
    ("snow", ["cold", "white", "winter", "flakes"], "rain", ["wet", "drops", "clouds", "water"]),
    ("bread", ["bake", "flour", "loaf", "slice"], "cake", ["sweet", "bake", "birthday", "flour"]),
    ("chess", ["board", "king", "pieces", "strategy"], "checkers", ["board", "jump", "pieces"]),
]
TEST_WORDS = {"snow", "bread", "chess"}


def generate(seed):
    tasks = []
    for word, hints, spy_word, spy_hints in PAIRS:
        for players in (4, 5, 6):
            tasks.append({
                "id": f"{word}-{spy_word}-{players}p",
                # what a civilian is asked (the probes echo it), a reference description, another player's words
                "prompt": f"Your secret word is '{word}'. Describe it in one short sentence without saying it.",
                "gold": f"It is something {hints[0]} and {hints[1]}.",
                "decoys": [f"Mostly {hints[2]}, sometimes {hints[-1]}."],
                "word": word, "hints": hints, "spy_word": spy_word, "spy_hints": spy_hints,
                "players": players, "spies": 1 if players < 6 else 2, "rounds": 2,
            })
    return {"train": [t for t in tasks if t["word"] not in TEST_WORDS],
            "test": [t for t in tasks if t["word"] in TEST_WORDS]}
