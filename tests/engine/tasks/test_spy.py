"""Who is the spy: the rules against hand-played games, and both training modes taking a real step on
the tiny model (shared: both roles on one server; adversarial: civilians and spies on two servers)."""

from __future__ import annotations

import random

import pytest

from engine.config import SwarmConfig
from engine.tasks.spy import (
    Mode,
    Player,
    Role,
    SpyTask,
    clients_for,
    dataset,
    deal,
    describe_prompt,
    parse_vote,
    play,
    play_games,
    says_word,
    tally,
    winner,
)

TASK = SpyTask("apple-pear-4p", "apple", "pear", players=4, spies=1, max_rounds=2)


def scripted(seed: int, describe: dict[Role, str], vote_for_spy: dict[Role, bool]):
    """speak() for a game dealt from `seed`: fixed descriptions per role; votes name the spy or a civilian."""
    players = deal(TASK, random.Random(seed))
    spy = next(p for p in players if p.role is Role.SPY)
    civ = next(p for p in players if p.role is Role.CIVILIAN)

    def speak(role: Role, prompt: str) -> str:
        if "Who is the spy?" not in prompt:
            return describe[role]
        if prompt.startswith(f"Game 'Who is the spy'. You are {civ.name};") and not vote_for_spy[role]:
            return spy.name  # the named civilian always suspects the spy (a 2-2 split otherwise)
        return f"I think it is {spy.name if vote_for_spy[role] else civ.name}"

    return speak, players


def test_deal_draws_random_names_ids_and_seats():
    a, b = deal(TASK, random.Random(1)), deal(TASK, random.Random(2))
    assert [p.name for p in a] != [p.name for p in b] and len({p.pid for p in a}) == 4
    assert [p.role for p in a].count(Role.SPY) == 1 and {p.word for p in a} == {"apple", "pear"}
    with pytest.raises(ValueError, match="fewer than civilians"):
        SpyTask("x", "a", "b", players=4, spies=2)


def test_tally_winner_and_vote_parsing():
    p = [Player(f"P{i}", n, Role.CIVILIAN, "apple") for i, n in enumerate(["Ada Berg", "Jun Silva", "Uma Rossi"])]
    assert tally([p[0], p[0], p[1]]) is p[0]
    assert tally([p[0], p[1]]) is None and tally([None, None]) is None  # a tie or no votes: nobody out
    assert parse_vote("Not Ada... it is Jun, surely", p, p[2]) is p[1]  # the last one named
    assert parse_vote("Uma Rossi or P0", p, p[2]) is p[0]  # never the voter itself; ids count
    spy = Player("S", "Wen Weber", Role.SPY, "pear")
    assert winner([*p, spy]) is None
    spy.alive = False
    assert winner([*p, spy]) is Role.CIVILIAN
    spy.alive, p[0].alive, p[1].alive = True, False, False
    assert winner([*p, spy]) is Role.SPY  # 1 spy vs 1 civilian


def test_civilians_who_find_the_spy_win_in_round_one():
    speak, _ = scripted(7, {Role.CIVILIAN: "a red fruit", Role.SPY: "a green fruit"},
                        {Role.CIVILIAN: True, Role.SPY: False})
    res = play(TASK, speak, random.Random(7))
    assert (res.winner, res.rounds) == (Role.CIVILIAN, 1)
    assert res.rewards() == {Role.CIVILIAN: 1.0, Role.SPY: 0.0}
    assert res.transcript[-1].endswith("was voted out.")


def test_saying_the_secret_word_eliminates_the_speaker():
    speak, _ = scripted(3, {Role.CIVILIAN: "a red fruit", Role.SPY: "I love Pears"}, {r: False for r in Role})
    res = play(TASK, speak, random.Random(3))
    assert (res.winner, res.rounds) == (Role.CIVILIAN, 1)  # decided after the round's descriptions, no vote
    assert [line for line in res.transcript if "said the secret word" in line] and "voted out" not in res.transcript[-1]
    speak, _ = scripted(3, {Role.CIVILIAN: "it is an apple", Role.SPY: "a fruit"}, {r: False for r in Role})
    assert play(TASK, speak, random.Random(3)).winner is Role.SPY  # every civilian out: spies win


def test_spies_who_survive_every_round_win():
    speak, _ = scripted(5, {r: "a fruit" for r in Role}, {r: False for r in Role})
    players = deal(TASK, random.Random(5))

    def split(role, prompt):  # two votes each for two civilians: a tie every round
        if "Who is the spy?" in prompt:
            me = prompt.split("You are ")[1].split(";")[0]
            civs = [p.name for p in players if p.role is Role.CIVILIAN and p.name != me]
            return civs[0] if players.index(next(p for p in players if p.name == me)) % 2 else civs[1]
        return "a fruit"

    res = play(TASK, split, random.Random(5))
    assert res.winner is Role.SPY and res.rounds in (1, 2)


def test_dataset_is_reproducible_and_valid():
    a, b = dataset(20, seed=0), dataset(20, seed=0)
    assert a == b and all(t.civilian_word != t.spy_word and t.spies < t.players - t.spies for t in a)


def _config(batch: int) -> SwarmConfig:
    return SwarmConfig.model_validate({
        "model": {"name": "tiny"}, "pool": {"batch_size": batch, "group_size": 2},
        "training": {"max_steps": 1, "mini_batch_size": 8, "micro_batch_size": 4},
    })


SAMPLING = {"temperature": 1.0, "max_tokens": 6}
SMALL = SpyTask("cat-dog-3p", "cat", "dog", players=3, spies=1, max_rounds=1)


@pytest.mark.slow
def test_shared_mode_trains_both_roles_on_one_server(live_server):
    srv = live_server(_config(batch=2))  # one task x two roles = two groups
    with srv.client() as c:
        rewards = play_games(clients_for(Mode.SHARED, c), [SMALL], repeats=2, sampling=SAMPLING)
        assert all(r["civilian"] + r["spy"] == 1.0 for r in rewards)
        st = c.wait_for_step(1, timeout=120)
        assert st["episode_counts"]["ended"] == 4 and st["last_metrics"]["episodes"] == 4.0


@pytest.mark.slow
def test_adversarial_mode_trains_each_side_on_its_own_server(live_server):
    civ_srv, spy_srv = live_server(_config(batch=1)), live_server(_config(batch=1))
    with civ_srv.client() as civ, spy_srv.client() as spy:
        with pytest.raises(ValueError, match="second server"):
            clients_for(Mode.ADVERSARIAL, civ)
        rewards = play_games(clients_for(Mode.ADVERSARIAL, civ, spy), [SMALL], repeats=2, sampling=SAMPLING)
        assert len(rewards) == 2
        for client in (civ, spy):
            st = client.wait_for_step(1, timeout=120)
            assert st["episode_counts"]["ended"] == 2 and st["last_metrics"]["episodes"] == 2.0


def test_the_describe_question_ends_with_the_instruction_and_keeps_the_last_twelve_lines():
    first = describe_prompt("Ada Berg", "P1230", "apple", 1, [])
    assert "So far:\n(nothing yet)\n" in first
    assert first.endswith("Your secret word is 'apple'. Describe it in one short sentence (what it looks like, what "
                          "it is for, where it is found) without saying 'apple'.")
    later = describe_prompt("Ada Berg", "P1230", "apple", 2, [f"line {i}" for i in range(20)])
    assert "line 7\n" not in later and "line 8\nline 9" in later and "line 19\nYour secret word" in later
    assert says_word("Two Apples, red", "apple") and not says_word("pineapple juice", "apple")
