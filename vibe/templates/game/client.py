"""A multi-agent word game with shared parameters: every player is the same model (one episode, one
server). Civilians share a secret word, the spy has a related one; each player describes its word
without saying it, then every civilian votes for the player it thinks is the spy.

Reward components: `describe` (half the mean description score of all players, from reward.score) and
`vote` (half the share of civilians who voted for the spy).
"""

import random
import re

from reward import score


def _say(llm, model, sampling, text):
    out = llm.chat.completions.create(model=model, messages=[{"role": "user", "content": text}], **sampling)
    return (out.choices[0].message.content or "").strip()


def run(llm, model, task, sampling):
    rng = random.Random()  # names and seats change every episode, so no policy can memorise them
    names = rng.sample(["Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal"], task["players"])
    spy = rng.randrange(task["players"])
    descriptions, describe_scores = [], []
    for i, name in enumerate(names):
        word = task["spy_word"] if i == spy else task["word"]
        seen = "".join(f"\n{n}: {d}" for n, d in zip(names, descriptions, strict=False))
        text = _say(llm, model, sampling,
                    f"You are {name} in a word game. Your secret word is '{word}'. Describe it in one short "
                    f"sentence without saying it.{' Descriptions so far:' + seen if seen else ''}")
        player_task = {**task, "word": word, "hints": task["spy_hints"] if i == spy else task["hints"],
                       "decoys": list(descriptions)}
        describe_scores.append(sum(score(player_task, text).values()))
        descriptions.append(text)
    table = "\n".join(f"{n}: {d}" for n, d in zip(names, descriptions, strict=False))
    votes = []
    for i, name in enumerate(names):
        if i == spy:
            continue
        reply = _say(llm, model, sampling,
                     f"You are {name}. One player has a different word. Descriptions:\n{table}\n"
                     f"Answer with the name of the spy only.")
        picked = [n for n in names if re.search(rf"\b{n}\b", reply)]
        votes.append(1.0 if picked[-1:] == [names[spy]] else 0.0)
    return {"describe": 0.5 * sum(describe_scores) / len(describe_scores), "vote": 0.5 * sum(votes) / len(votes)}
