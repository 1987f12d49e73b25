"""What the social-deduction games (who is the spy, werewolf) share: seats, votes, speakers, episode groups.

- Seats: random full names and ids per game, so no policy can memorise who sits where.
- Votes: `parse_vote` reads the candidate a reply names last (full name, first name or id; never the voter);
  a reply that names nobody valid is None, which every game counts as an abstention. `tally` is plurality,
  and a tie (or no valid vote) picks nobody.
- Speakers: a game asks `speak(key, prompt)` for every move; `openai_speaker` answers over OpenAI clients,
  one (client, model) per key, so a key selects whose episode (and model) a call lands in. A prompt is one
  user message, or a player's whole conversation (OpenAI messages): a game that keeps one per player sends
  each call as the last one extended, so the server's token merging folds a player's calls into one
  training sample instead of one per call (each re-sending the game so far).
- Episode groups: `play_grouped` plays games as EpisodeGroups (key -> server) that commit on every server or
  none, with one task id per key, so keys served by one shared model still form their own GRPO groups.
"""

from __future__ import annotations

import random
import re
import secrets
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from engine.client import Episode, EpisodeGroup, SwarmClient

__all__ = [
    "FIRST", "LAST", "Mode", "Player", "Prompt", "Speak", "as_messages", "episode_speaker", "full_names",
    "openai_speaker", "parse_vote", "play_grouped", "roster", "side_clients", "tally",
]

FIRST = ["Ada", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal", "Lena",
         "Mateo", "Nia", "Oskar", "Priya", "Quinn", "Rafa", "Sofia", "Tariq", "Uma", "Viktor", "Wen", "Yara"]
LAST = ["Abara", "Berg", "Costa", "Dube", "Eriksen", "Fujita", "Garcia", "Haddad", "Ivanova", "Jensen",
        "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov", "Rossi", "Silva", "Tanaka", "Weber"]


class Mode(str, Enum):
    SHARED = "shared"  # one model plays every side, each side its own episodes (and GRPO groups)
    ADVERSARIAL = "adversarial"  # one server per side (non-shared parameters)


@dataclass
class Player:
    pid: str
    name: str
    role: Enum
    word: str = ""  # the secret word (who is the spy); empty where a game has none
    alive: bool = True


def full_names(rng: random.Random, n: int) -> list[str]:
    """`n` distinct random full names (480 to draw from)."""
    return rng.sample([f"{f} {ln}" for f in FIRST for ln in LAST], n)


def parse_vote(reply: str, candidates: list[Player], voter: Player | None) -> Player | None:
    """The candidate (not the voter) named last in the reply, by full name, first name or id; None when the
    reply names no candidate (an invalid vote)."""
    best, pos = None, -1
    for p in candidates:
        if p is voter:
            continue
        for key in (p.name, p.name.split()[0], p.pid):
            for m in re.finditer(rf"\b{re.escape(key)}\b", reply or "", flags=re.I):
                if m.start() > pos:
                    best, pos = p, m.start()
    return best


def tally(votes: list[Player | None]) -> Player | None:
    """The plurality target; a tie (or no valid vote) picks nobody."""
    counts = Counter(id(v) for v in votes if v is not None)
    if not counts:
        return None
    ranked = counts.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    return next(v for v in votes if v is not None and id(v) == ranked[0][0])


def roster(players: list[Player]) -> str:
    """"Name (id), ..." of the given players, as the prompts list them."""
    return ", ".join(f"{p.name} ({p.pid})" for p in players)


K = TypeVar("K", bound=Hashable)
# speak(key, prompt) -> reply: the key selects whose model answers (its episode); the prompt is one user
# message or a conversation
Prompt = str | list[dict[str, str]]
Speak = Callable[[Any, Prompt], str]


def as_messages(prompt: Prompt) -> list[dict[str, str]]:
    """A prompt as OpenAI chat messages: a string is one user message, a conversation is itself."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt


def openai_speaker(llms: Mapping[Any, tuple[Any, str]], sampling: dict[str, Any]) -> Speak:
    """speak() over OpenAI clients: key -> (client, model name)."""

    def speak(key: Any, prompt: Prompt) -> str:
        llm, model = llms[key]
        out = llm.chat.completions.create(model=model, messages=as_messages(prompt), **sampling)
        return out.choices[0].message.content or ""

    return speak


def episode_speaker(episodes: Mapping[K, Episode], sampling: dict[str, Any]) -> Speak:
    """speak() whose key-k calls go through episode k (no client retries: a failed call fails the game)."""
    return openai_speaker({k: (ep.openai(max_retries=0), ep.model) for k, ep in episodes.items()}, sampling)


def new_rng() -> random.Random:
    """A fresh game's seats and draws, never repeated across games."""
    return random.Random(secrets.randbits(64))


def side_clients(mode: Mode, sides: tuple[str, str], server_1: SwarmClient,
                 server_2: SwarmClient | None = None) -> dict[str, SwarmClient]:
    """Side -> client: both sides on server 1 (SHARED), or the first on 1 and the second on 2 (ADVERSARIAL)."""
    if mode is Mode.ADVERSARIAL:
        if server_2 is None:
            raise ValueError(f"adversarial mode needs a second server for the {sides[1]}")
        return {sides[0]: server_1, sides[1]: server_2}
    return {sides[0]: server_1, sides[1]: server_1}


T = TypeVar("T")


def play_grouped(clients: Mapping[str, SwarmClient], tasks: list[T], repeats: int,
                 play_one: Callable[[Mapping[str, Episode], T], dict[str, float]], task_key: Callable[[T], str],
                 concurrency: int = 8, prefix: str = "") -> list[dict[str, float]]:
    """`repeats` games of every task, each an EpisodeGroup (key -> its client's server) committed with the
    rewards `play_one` returns. Each (position, task) and key is one GRPO group: a server that serves
    several keys sees that many groups per task (size its batch for that). `prefix` (e.g. the step) keeps
    a task drawn again later from joining an old group. The r-th game of a task is episode r of its group on
    every server, so each call samples from its own seeded stream (engine.server.streams): a game's tokens
    depend on the run seed, the task and r, not on which games happened to share a batch."""

    def one(job: tuple[int, T, int]) -> dict[str, float]:
        k, task, r = job
        ids = {key: f"{prefix}{k}:{task_key(task)}:{key}" for key in clients}
        with EpisodeGroup(dict(clients), ids, index=r) as group:
            rewards = play_one(group.episodes, task)
            group.commit(rewards)
        return rewards

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, [(k, t, r) for k, t in enumerate(tasks) for r in range(repeats)]))
