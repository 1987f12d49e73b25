"""Who is the spy: a multi-agent word game for self-play training, in two modes.

Rules (after the AgentJet vibe-training prompt): N players, most civilians sharing a word, a few spies
with a similar word. Each round every living player describes its word (never saying it: a player who
does is eliminated on the spot), then every living player votes for the player it suspects; the
plurality is eliminated (a tie eliminates nobody). Civilians win when every spy is out; spies win when
they are at least as many as the civilians, or when they survive the last round. Winners get reward 1,
losers 0. Names and ids are drawn at random for every game, so no policy can memorise seats.

Modes (the same game code; only the episodes differ):
- SHARED: one model plays every role. Civilians' and spies' calls go through two episodes on the same
  server (task ids `<task>:civilian` and `<task>:spy`), so each role forms its own GRPO groups.
- ADVERSARIAL: civilians on server 1, spies on server 2, one episode each in an EpisodeGroup that commits
  or aborts together; each server trains only its own side's samples.

Not here: the supervised warm start (the server trains on what its model generated, so reference answers
cannot be fed through the episode API); `vibe train --warm-start N` trains one on the gold descriptions
first with engine.training.supervised.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine.client import Episode, SwarmClient
from engine.tasks import social
from engine.tasks.social import FIRST, LAST, Mode, Player, Speak, openai_speaker, parse_vote, tally

__all__ = [
    "FIRST", "LAST", "GameResult", "Mode", "Player", "Role", "SpyTask", "clients_for", "dataset", "deal",
    "describe_prompt", "openai_speaker", "parse_vote", "play", "play_episodes", "play_games", "says_word",
    "tally", "vote_prompt", "winner",
]


class Role(str, Enum):
    CIVILIAN = "civilian"
    SPY = "spy"


WORD_PAIRS = [
    ("apple", "pear"), ("cat", "dog"), ("coffee", "tea"), ("piano", "guitar"), ("sun", "moon"),
    ("train", "bus"), ("river", "lake"), ("book", "magazine"), ("rose", "tulip"), ("snow", "rain"),
    ("bread", "cake"), ("chess", "checkers"), ("shoe", "boot"), ("violin", "cello"), ("bee", "wasp"),
]


@dataclass(frozen=True)
class SpyTask:
    id: str
    civilian_word: str
    spy_word: str
    players: int = 4
    spies: int = 1
    max_rounds: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.spies < self.players - self.spies:
            raise ValueError(f"{self.spies} spies among {self.players} players: spies must be fewer than civilians")


@dataclass
class GameResult:
    winner: Role
    rounds: int
    transcript: list[str] = field(default_factory=list)
    # (role, the speaker's word, the description, the descriptions said before it): for description rewards
    descriptions: list[tuple[Role, str, str, list[str]]] = field(default_factory=list)

    def rewards(self) -> dict[Role, float]:
        return {role: 1.0 if role is self.winner else 0.0 for role in Role}


def dataset(n: int, seed: int, players: tuple[int, ...] = (4, 5), max_rounds: int = 2) -> list[SpyTask]:
    """`n` tasks: word pairs (either way round) x player counts, one spy per 4 players."""
    rng = random.Random(seed)
    tasks = []
    for _ in range(n):
        a, b = rng.choice(WORD_PAIRS)
        civ, spy = (a, b) if rng.random() < 0.5 else (b, a)
        k = rng.choice(players)
        tasks.append(SpyTask(f"{civ}-{spy}-{k}p", civ, spy, k, max(1, k // 4), max_rounds))
    return tasks


def deal(task: SpyTask, rng: random.Random) -> list[Player]:
    """Random full names, random ids, random spy seats."""
    names = social.full_names(rng, task.players)
    spies = set(rng.sample(range(task.players), task.spies))
    return [
        Player(f"P{rng.randrange(100, 1000)}{i}", name, Role.SPY if i in spies else Role.CIVILIAN,
               task.spy_word if i in spies else task.civilian_word)
        for i, name in enumerate(names)
    ]


def winner(players: list[Player]) -> Role | None:
    spies = sum(1 for p in players if p.alive and p.role is Role.SPY)
    civilians = sum(1 for p in players if p.alive and p.role is Role.CIVILIAN)
    if spies == 0:
        return Role.CIVILIAN
    if spies >= civilians:
        return Role.SPY
    return None


def says_word(text: str, word: str) -> bool:
    """Whether a description names the secret word (or its plural): the speaker is out."""
    return re.search(rf"\b{re.escape(word)}s?\b", text or "", flags=re.I) is not None


def describe_prompt(name: str, pid: str, word: str, rnd: int, seen: list[str]) -> str:
    """What a player is asked when its turn to describe comes: the game so far, then the instruction last
    (a small model follows the last thing it read), with the kinds of clue a description may give."""
    so_far = "\n".join(seen[-12:]) or "(nothing yet)"
    return (f"Game 'Who is the spy'. You are {name} ({pid}). Round {rnd}.\nSo far:\n{so_far}\n"
            f"Your secret word is '{word}'. Describe it in one short sentence (what it looks like, what it is "
            f"for, where it is found) without saying '{word}'.")


def vote_prompt(name: str, word: str, roster: str, seen: list[str]) -> str:
    """What a player is asked when the round's descriptions are in."""
    return (f"Game 'Who is the spy'. You are {name}; your word is '{word}'. Players: {roster}.\n"
            + "\n".join(seen[-12:]) + "\nWho is the spy? Answer with one player's name.")


def play(task: SpyTask, speak: Speak, rng: random.Random) -> GameResult:
    """Play one game to its end; every model call goes through `speak`."""
    players = deal(task, rng)
    log: list[str] = []
    said: list[tuple[Role, str, str, list[str]]] = []
    for rnd in range(1, task.max_rounds + 1):
        for p in [p for p in players if p.alive]:
            text = speak(p.role, describe_prompt(p.name, p.pid, p.word, rnd, log))
            text = " ".join(text.split())[:200]
            said.append((p.role, p.word, text, [d[2] for d in said]))
            if says_word(text, p.word):
                p.alive = False
                log.append(f"{p.name} said the secret word and is out.")
            else:
                log.append(f"{p.name}: {text}")
        if (w := winner(players)) is not None:
            return GameResult(w, rnd, log, said)
        alive = [p for p in players if p.alive]
        names = social.roster(alive)
        votes = [parse_vote(speak(p.role, vote_prompt(p.name, p.word, names, log)), alive, p) for p in alive]
        out = tally(votes)
        if out is not None:
            out.alive = False
            log.append(f"{out.name} was voted out.")
        if (w := winner(players)) is not None:
            return GameResult(w, rnd, log, said)
    return GameResult(Role.SPY, task.max_rounds, log, said)  # the spies survived every round


def play_episodes(episodes: Mapping[str, Episode], task: SpyTask, sampling: dict[str, Any],
                  rng: random.Random | None = None) -> dict[str, float]:
    """Play one game through the given episodes (keys: role values) and return each role's reward."""
    speak = social.episode_speaker(episodes, sampling)
    result = play(task, lambda role, prompt: speak(role.value, prompt), rng or social.new_rng())
    return {role.value: r for role, r in result.rewards().items()}


def clients_for(mode: Mode, server_1: SwarmClient, server_2: SwarmClient | None = None) -> dict[str, SwarmClient]:
    """Role -> client: both roles on server 1 (SHARED), or civilians on 1 and spies on 2 (ADVERSARIAL)."""
    return social.side_clients(mode, (Role.CIVILIAN.value, Role.SPY.value), server_1, server_2)


def play_games(clients: Mapping[str, SwarmClient], tasks: list[SpyTask], repeats: int, sampling: dict[str, Any],
               concurrency: int = 8, prefix: str = "") -> list[dict[str, float]]:
    """`repeats` games of every task, committed together per game. Each (position, task) and role is one
    GRPO group: in SHARED mode a server's pool sees 2 x len(tasks) groups (size its batch for that).
    `prefix` (e.g. the step) keeps a task drawn again later from joining an old group."""
    return social.play_grouped(clients, tasks, repeats, lambda eps, task: play_episodes(eps, task, sampling),
                        lambda task: task.id, concurrency, prefix)
