"""Mock dataset: word pairs with hint features, each pair with several player counts."""

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


def generate(seed):
    tasks = []
    for word, hints, spy_word, spy_hints in PAIRS:
        for players in (3, 4, 5):
            gold = f"It is something {hints[0]} and {hints[1]}."
            tasks.append({
                "id": f"{word}-{spy_word}-{players}p",
                "prompt": f"Your secret word is '{word}'. Describe it in one short sentence without saying it.",
                "gold": gold,
                # another player's words: a description of the same word that a copycat would repeat
                "decoys": [f"Mostly {hints[2]}, sometimes {hints[-1]}."],
                "word": word, "hints": hints, "spy_word": spy_word, "spy_hints": spy_hints, "players": players,
            })
    test_pairs = {"snow", "bread", "chess"}
    return {"train": [t for t in tasks if t["word"] not in test_pairs],
            "test": [t for t in tasks if t["word"] in test_pairs]}
