"""Werewolf: a multi-agent social-deduction game for self-play training, in two modes (as the spy game).

Rules. N players: W werewolves (who know each other), one seer, the rest villagers. Each round:
- Night: every living werewolf names a living non-werewolf; the plurality is killed (a tie, or no valid
  name, kills nobody). The seer names one other living player and privately learns whether it is a
  werewolf: the answer goes into the seer's own conversation only, never into the public transcript.
- Day: the night's death is announced (roles are never revealed); every living player says one sentence
  (discussion, in seat order); then every living player votes for another living player. The plurality
  is eliminated; a tie (or no valid vote) eliminates nobody.
The village wins as soon as every werewolf is out; the werewolves win as soon as they are at least as many
as the others, or when they survive the last round (`max_rounds`: the village failed to find them).

Malformed moves: a reply that names no valid target (nobody, the speaker itself, a dead player, a fellow
werewolf at night) is an abstention: no vote, no kill, no inspection. Every move and every invalid one is
counted per role (`GameResult.moves`, `.invalid`) so a run can report how often the models abstained.

Rewards: the winning side 1, the losing side 0, for every member, with no shaping. Why none: the outcome
already prices what shaping would add (an abstaining voter or a seer who inspects nobody makes its side
lose more often), and every per-move bonus we considered rewards a proxy a policy can farm (naming a
werewolf rewards naming everyone in turn; speaking at length rewards length).

Seats. Names, ids and seats are dealt at random from the item's deal seed: the items of a data set (and
the held-out items, which never overlap them) are all different deals, and the G games of one GRPO group
replay the same deal, so their advantages compare the policy on the same game.

Prompts. Every player keeps one conversation with its model for the whole game (`Memory`): its first turn
tells it the game, its name and its role; each later turn only what happened since its last one, then the
question; its replies stay in the conversation as its own turns. Each call re-sends the previous one
extended, so the server's token merging folds a player's calls into one training sample; a prompt per
call that restated the game so far cost 17.5 samples per side and game, each re-sending the transcript.

Sides are the trainable roles (`roles`): the village (seer and villagers, one episode per game) and the
werewolves (one episode per game). A side's moves all land in its episode, and its reward is the outcome.
- SHARED: one model plays both sides; the two sides' episodes go to the same server under their own task
  ids (`<task>:village`, `<task>:werewolves`), so each side forms its own GRPO groups (a zero-sum game in
  one episode would always score 1/2). `swarm train --task werewolf` does this.
- ADVERSARIAL: the village on server 1, the werewolves on server 2, one episode each in an EpisodeGroup
  that commits or aborts together; each server trains only its own side. `swarm train` with
  `team: {agents: {village: ..., werewolves: ...}}` does this.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine.client import Episode, SwarmClient
from engine.tasks import social
from engine.tasks.base import Item
from engine.tasks.social import Mode, Player, Speak, parse_vote

__all__ = [
    "GameResult", "Mode", "Night", "Role", "Setup", "Side", "Werewolf", "clients_for", "day_vote", "deal",
    "item_setup", "night", "play", "play_episodes", "play_games", "side_speaker", "winner",
]


class Role(str, Enum):
    WEREWOLF = "werewolf"
    SEER = "seer"
    VILLAGER = "villager"

    @property
    def side(self) -> Side:
        return Side.WEREWOLVES if self is Role.WEREWOLF else Side.VILLAGE


class Side(str, Enum):
    VILLAGE = "village"
    WEREWOLVES = "werewolves"


@dataclass(frozen=True)
class Setup:
    """One game's shape: players, werewolves among them, and the round limit."""

    players: int = 5
    wolves: int = 1
    max_rounds: int = 3

    def __post_init__(self) -> None:
        if not 1 <= self.wolves < self.players - self.wolves or self.players < 3:
            raise ValueError(
                f"{self.wolves} werewolves among {self.players} players: werewolves must be fewer than the others "
                "(a seer and at least one villager)"
            )
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {self.max_rounds}")


@dataclass
class Night:
    """What a night did: the player killed (None: nobody) and the seer's finding (None: no inspection)."""

    victim: Player | None
    inspected: Player | None


@dataclass
class GameResult:
    winner: Side
    rounds: int
    transcript: list[str] = field(default_factory=list)
    moves: Counter = field(default_factory=Counter)  # Role -> moves asked (targets and votes, not speeches)
    invalid: Counter = field(default_factory=Counter)  # Role -> of them, replies naming no valid target
    seer_found: int = 0  # inspections that revealed a werewolf

    def rewards(self) -> dict[Side, float]:
        return {side: 1.0 if side is self.winner else 0.0 for side in Side}


def deal(setup: Setup, rng: random.Random) -> list[Player]:
    """Random full names, ids and seats: `wolves` werewolves, one seer, the rest villagers."""
    names = social.full_names(rng, setup.players)
    seats = rng.sample(range(setup.players), setup.wolves + 1)
    roles = {s: Role.WEREWOLF for s in seats[1:]} | {seats[0]: Role.SEER}
    return [Player(f"P{rng.randrange(100, 1000)}{i}", name, roles.get(i, Role.VILLAGER)) for i, name in enumerate(names)]


def night(players: list[Player], wolf_targets: list[Player | None], seer_target: Player | None) -> Night:
    """Apply a night: the werewolves' plurality target dies (never a werewolf; a tie kills nobody); the
    seer's target is inspected (the caller tells only the seer). Targets come from `parse_vote`."""
    victim = social.tally([t for t in wolf_targets if t is not None and t.alive and t.role is not Role.WEREWOLF])
    if victim is not None:
        victim.alive = False
    inspected = seer_target if seer_target is not None and seer_target.role is not Role.SEER else None
    return Night(victim, inspected)


def day_vote(votes: list[Player | None]) -> Player | None:
    """Apply the day's vote: the plurality is eliminated; a tie or no valid vote eliminates nobody."""
    out = social.tally(votes)
    if out is not None:
        out.alive = False
    return out


def winner(players: list[Player]) -> Side | None:
    """The side that has won, or None while the game goes on."""
    wolves = sum(1 for p in players if p.alive and p.role is Role.WEREWOLF)
    others = sum(1 for p in players if p.alive and p.role is not Role.WEREWOLF)
    if wolves == 0:
        return Side.VILLAGE
    if wolves >= others:
        return Side.WEREWOLVES
    return None


def _role_line(p: Player, players: list[Player]) -> str:
    """What only `p` knows from the deal: its role and, for a werewolf, the rest of the pack."""
    if p.role is Role.WEREWOLF:
        pack = [q.name for q in players if q.role is Role.WEREWOLF and q is not p]
        return "You are secretly a werewolf" + (f", with {', '.join(pack)}." if pack else ".")
    if p.role is Role.SEER:
        return "You are the seer: each night you inspect one player and learn whether it is a werewolf."
    return "You are a villager."


@dataclass
class Memory:
    """One player's conversation with its model. Each turn appends what the player has not been told yet
    (the public lines since its last turn, a seer's new findings) and the question, then its reply, so
    every call re-sends the previous one extended: the server merges a player's calls into one sample."""

    messages: list[dict[str, str]] = field(default_factory=list)
    heard: int = 0  # public log lines already told
    told: int = 0  # the seer's findings already told

    def news(self, p: Player, players: list[Player], findings: list[str], rnd: int, log: list[str]) -> str:
        """The next user turn's news, up to the question; from now on it counts as told."""
        parts = [] if self.messages else [f"Game 'Werewolf'. You are {p.name} ({p.pid}). {_role_line(p, players)}"]
        if p.role is Role.SEER and (seen := findings[self.told:]):
            parts.append("What you saw: " + " ".join(seen))
        lines = log[self.heard:]
        heading = "Since your last turn:" if self.messages else "So far:"
        parts.append(f"Round {rnd}. {heading}\n" + ("\n".join(lines) if lines else "(nothing new)"))
        self.heard, self.told = len(log), len(findings)
        return "\n".join(parts) + "\n"


def play(setup: Setup, speak: Speak, rng: random.Random) -> GameResult:
    """Play one game to its end; every model call goes through `speak(role, conversation)`, the asking
    player's conversation so far (see Memory)."""
    players = deal(setup, rng)
    log: list[str] = []
    findings: list[str] = []  # the seer's private notes
    memories = {p.pid: Memory() for p in players}
    res = GameResult(Side.WEREWOLVES, 0, log)

    def say(p: Player, rnd: int, question: str) -> str:
        mem = memories[p.pid]
        mem.messages.append({"role": "user", "content": mem.news(p, players, findings, rnd, log) + question})
        reply = speak(p.role, list(mem.messages))  # a copy: the caller may keep what it was sent
        mem.messages.append({"role": "assistant", "content": reply})
        return reply

    def ask(p: Player, rnd: int, question: str, candidates: list[Player]) -> Player | None:
        target = parse_vote(say(p, rnd, question), candidates, p)
        res.moves[p.role] += 1
        res.invalid[p.role] += target is None
        return target

    for rnd in range(1, setup.max_rounds + 1):
        res.rounds = rnd
        alive = [p for p in players if p.alive]
        prey = [p for p in alive if p.role is not Role.WEREWOLF]
        wolf_targets = [
            ask(p, rnd, f"It is night. Living villagers: {social.roster(prey)}.\n"
                "Which one do the werewolves kill? Answer with one name.", prey)
            for p in alive if p.role is Role.WEREWOLF
        ]
        seer = next((p for p in alive if p.role is Role.SEER), None)
        seer_target = None if seer is None else ask(
            seer, rnd, f"It is night. Living players: {social.roster(alive)}.\n"
            "Whom do you inspect? Answer with one name.", alive)
        done = night(players, wolf_targets, seer_target)
        if done.inspected is not None:
            is_wolf = done.inspected.role is Role.WEREWOLF
            res.seer_found += is_wolf
            findings.append(f"Night {rnd}: {done.inspected.name} is {'a werewolf' if is_wolf else 'not a werewolf'}.")
        log.append(f"Night {rnd}: {done.victim.name} was killed." if done.victim else f"Night {rnd}: nobody died.")
        if (w := winner(players)) is not None:
            res.winner = w
            return res
        alive = [p for p in players if p.alive]
        for p in alive:  # discussion: every living player speaks once
            text = " ".join(say(p, rnd, "It is day. Say one short sentence to the village.").split())[:200]
            log.append(f"{p.name}: {text}")
        votes = [
            ask(p, rnd, f"Living players: {social.roster(alive)}.\n"
                "Whom do you vote to eliminate? Answer with one player's name.", alive)
            for p in alive
        ]
        out = day_vote(votes)
        log.append(f"Day {rnd}: {out.name} was voted out." if out else f"Day {rnd}: the vote was tied; nobody is out.")
        if (w := winner(players)) is not None:
            res.winner = w
            return res
    return res  # the werewolves survived every round


def side_speaker(speak: Speak) -> Speak:
    """speak(role, conversation) over a speaker keyed by side value: a role's moves go to its side's episode."""
    return lambda role, prompt: speak(role.side.value, prompt)


def play_episodes(episodes: Mapping[str, Episode], setup: Setup, sampling: dict[str, Any],
                  rng: random.Random) -> GameResult:
    """Play one game through the given episodes (keys: side values)."""
    return play(setup, side_speaker(social.episode_speaker(episodes, sampling)), rng)


def clients_for(mode: Mode, server_1: SwarmClient, server_2: SwarmClient | None = None) -> dict[str, SwarmClient]:
    """Side -> client: both sides on server 1 (SHARED), or the village on 1 and the werewolves on 2."""
    return social.side_clients(mode, (Side.VILLAGE.value, Side.WEREWOLVES.value), server_1, server_2)


def item_setup(item: Item) -> Setup:
    """The game shape a task item deals."""
    return Setup(item.extra["players"], item.extra["wolves"], item.extra["max_rounds"])


def play_games(clients: Mapping[str, SwarmClient], items: list[Item], repeats: int, sampling: dict[str, Any],
               concurrency: int = 8, prefix: str = "") -> list[GameResult]:
    """`repeats` games of every item, committed together per game (see engine.tasks.social.play_grouped)."""
    results: list[GameResult] = []

    def one(episodes: Mapping[str, Episode], item: Item) -> dict[str, float]:
        res = play_episodes(episodes, item_setup(item), sampling, random.Random(item.extra["deal_seed"]))
        results.append(res)
        return {side.value: r for side, r in res.rewards().items()}

    social.play_grouped(clients, items, repeats, one, lambda item: item.id, concurrency, prefix)
    return results


# (players, werewolves) of the built-in task's games
SETUPS = ((5, 1), (6, 1), (7, 2))


class Werewolf:
    """The built-in task: items are deals; `run_roles` plays one game, each side on its own model."""

    name = "werewolf"
    roles = tuple(s.value for s in Side)
    # Each side is its own episode even when one model plays both (see the module docstring): `swarm train`
    # runs every item as an episode group on its one server, with one task id per side.
    episodes_per_role = True

    def __init__(self, setups: tuple[tuple[int, int], ...] = SETUPS, max_rounds: int = 3) -> None:
        self.setups = [Setup(p, w, max_rounds) for p, w in setups]

    def dataset(self, n: int, seed: int) -> list[Item]:
        rng = random.Random(seed)
        items = []
        for _ in range(n):
            s = rng.choice(self.setups)
            deal_seed = rng.randrange(2**32)
            extra = {"players": s.players, "wolves": s.wolves, "max_rounds": s.max_rounds, "deal_seed": deal_seed}
            prompt = f"Werewolf: {s.players} players ({s.wolves} of them werewolves), at most {s.max_rounds} rounds"
            items.append(Item(f"ww{s.players}p{s.wolves}w-{deal_seed:08x}", prompt, None, extra))
        return items

    def run_roles(self, llms: Mapping[str, tuple[Any, str]], item: Item, sampling: dict[str, Any]) -> dict[str, float]:
        """Play the item's game, side -> (client, model) in, side -> reward out."""
        speak = side_speaker(social.openai_speaker(llms, sampling))
        res = play(item_setup(item), speak, random.Random(item.extra["deal_seed"]))
        return {side.value: r for side, r in res.rewards().items()}
