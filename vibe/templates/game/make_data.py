"""Mock dataset: civilian/spy word pairs with hint features, 4 or 5 players, disjoint test words.

Each task's `prompt` is the question a first speaker gets in the game (engine.tasks.spy.describe_prompt,
with a random name and id), and `gold` a reference description naming two of the word's hints: the
supervised warm start (`vibe train --warm-start N`) trains on exactly these pairs. One round per game keeps
a training step within a few minutes on a laptop CPU; raise ROUNDS for longer games.
"""

import random

from engine.tasks.spy import FIRST, LAST, describe_prompt

ROUNDS = 1
PAIRS = [
    ("apple", "red fruit tree sweet round juicy green crunchy pie eat",
     "pear", "green fruit tree juicy sweet soft yellow eat"),
    ("cat", "pet purrs whiskers fur meow paws tail animal mouse kitten",
     "dog", "pet barks loyal fur tail animal walk puppy bone paws"),
    ("coffee", "hot drink bitter morning beans cup caffeine brown brew mug",
     "tea", "hot drink leaves cup green herbal kettle milk mug"),
    ("piano", "keys music black white play instrument sound notes song",
     "guitar", "strings music wood play instrument sound song rock"),
    ("sun", "hot bright sky day light warm star yellow shines",
     "moon", "night sky bright round light white stars craters"),
    ("train", "rails travel fast station track engine passengers ride carriage",
     "bus", "road travel seats stop driver ride wheels ticket city"),
    ("river", "water flows long fish stream banks boat bridge current",
     "lake", "water still fish shore swim boat calm blue"),
    ("book", "pages read story paper author words library cover novel",
     "magazine", "pages read glossy monthly pictures articles paper news"),
    ("rose", "flower red thorns smell petals garden love pink bloom",
     "tulip", "flower spring petals garden colorful bulb yellow bloom"),
    ("snow", "cold white winter flakes ice frozen ski snowman",
     "rain", "wet drops clouds water umbrella storm grey puddles"),
    ("bread", "bake flour loaf slice toast butter wheat sandwich",
     "cake", "sweet bake birthday flour sugar candles cream dessert"),
    ("chess", "board king pieces strategy queen game knight checkmate",
     "checkers", "board jump pieces game red black kings"),
]
TEST_WORDS = {"snow", "bread", "chess"}
SHAPES = ["It is {a} and {b}.", "Something {a}, often {b}.", "You think of {a} and {b} when you see it.",
          "It is {a}; it makes me think of {b}."]


def generate(seed):
    rng = random.Random(seed)
    tasks = []
    for word, hints, spy_word, spy_hints in PAIRS:
        hints, spy_hints = hints.split(), spy_hints.split()
        for players in (4, 5):
            a, b = rng.sample(hints, 2)
            c, d = rng.sample([h for h in hints if h not in (a, b)], 2)
            name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            tasks.append({
                "id": f"{word}-{spy_word}-{players}p",
                # what a first civilian speaker is asked (the probes echo it), a reference description,
                # another player's words (a description that copies them earns nothing)
                "prompt": describe_prompt(name, f"P{rng.randrange(100, 1000)}0", word, 1, []),
                "gold": rng.choice(SHAPES).format(a=a, b=b),
                "decoys": [f"Mostly {c}, sometimes {d}."],
                "word": word, "hints": hints, "spy_word": spy_word, "spy_hints": spy_hints,
                "players": players, "spies": 1, "rounds": ROUNDS,
            })
    return {"train": [t for t in tasks if t["word"] not in TEST_WORDS],
            "test": [t for t in tasks if t["word"] in TEST_WORDS]}
