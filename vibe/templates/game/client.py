"""Who is the spy, shared parameters: one model plays every civilian and every spy (engine.tasks.spy),
with random names, ids and seats per game. Each role is its own episode (ROLES), so the civilians' and
the spies' calls are trained on their own side's reward.

Reward per role: `win` (0.5 when the role's side wins) and `describe` (0.5 x the mean reward.score of the
role's descriptions: hint features mentioned, the secret word never said, no copy of another player).
In shared mode exactly one side wins every game, so the mean `win` over both roles is fixed; what the
shared model can raise is `describe`, and each side's win rate.
"""

import random

from reward import score

from engine.tasks.spy import Role, SpyTask, openai_speaker, play

ROLES = ["civilian", "spy"]


def run(llm, model, task, sampling):
    game = SpyTask(task["id"], task["word"], task["spy_word"], task["players"], task["spies"], task["rounds"])
    speak = openai_speaker({Role(r): (llm[r], model) for r in ROLES}, sampling)
    result = play(game, speak, random.Random())
    out = {}
    for r in ROLES:
        role = Role(r)
        mine = [(word, text, before) for who, word, text, before in result.descriptions if who is role]
        scores = [sum(score(_as_player(task, role, word, before), text).values()) for word, text, before in mine]
        out[r] = {"win": 0.5 if result.winner is role else 0.0,
                  "describe": 0.5 * (sum(scores) / len(scores) if scores else 0.0)}
    return out


def _as_player(task, role, word, before):
    """The task as one player sees it: its own word and hints, the earlier descriptions as decoys."""
    hints = task["spy_hints"] if role is Role.SPY else task["hints"]
    return {**task, "word": word, "hints": hints, "decoys": before}
