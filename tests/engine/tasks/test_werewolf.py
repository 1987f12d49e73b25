"""Werewolf: the rules as pure functions on hand-built games, whole games played by scripted speakers
(the seer's findings stay private, invalid moves are abstentions and counted), and the task trained for
real on the tiny model: shared (both sides on one server, through `swarm train --task werewolf`) and
non-shared (one server per side, the team loop), with an episode group that aborts on both sides when
the werewolves' server dies mid-game."""

from __future__ import annotations

import json
import random

import pytest
from tests_support import swarm_train

from engine.jobs import TrainJob
from engine.tasks import get_task
from engine.tasks.base import split_items
from engine.tasks.social import episode_speaker, play_grouped
from engine.tasks.werewolf import (
    Mode,
    Player,
    Role,
    Setup,
    Side,
    clients_for,
    day_vote,
    deal,
    night,
    parse_vote,
    play,
    side_speaker,
    winner,
)


def _players(*roles: Role) -> list[Player]:
    names = ["Ada Berg", "Jun Silva", "Uma Rossi", "Wen Weber", "Ivo Costa", "Nia Dube", "Quinn Okafor"]
    return [Player(f"P{i}", names[i], r) for i, r in enumerate(roles)]


W, S, V = Role.WEREWOLF, Role.SEER, Role.VILLAGER


def test_deal_draws_random_names_ids_and_seats_with_one_seer():
    a, b = deal(Setup(7, 2), random.Random(1)), deal(Setup(7, 2), random.Random(2))
    assert [p.name for p in a] != [p.name for p in b] and len({p.pid for p in a}) == 7
    for game in (a, b):
        assert sorted(p.role.value for p in game) == ["seer"] + ["villager"] * 4 + ["werewolf"] * 2
    assert [p.role for p in a] != [p.role for p in b] or [p.pid for p in a] != [p.pid for p in b]
    with pytest.raises(ValueError, match="fewer than the others"):
        Setup(4, 2)


def test_the_night_kills_the_werewolves_plurality_and_a_split_pack_kills_nobody():
    p = _players(W, W, S, V, V)
    assert night(p, [p[3], p[3]], p[0]).victim is p[3] and not p[3].alive
    p = _players(W, W, S, V, V)
    out = night(p, [p[3], p[4]], None)  # the pack disagrees: a tie, nobody dies
    assert out.victim is None and all(q.alive for q in p) and out.inspected is None
    p = _players(W, W, S, V, V)
    assert night(p, [None, p[1]], None).victim is None  # abstention, and a fellow werewolf is no target
    p = _players(W, S, V)
    assert night(p, [None], p[0]).inspected is p[0]  # the seer's target, whatever it is


def test_the_day_vote_is_plurality_and_a_tie_eliminates_nobody():
    p = _players(W, S, V, V)
    assert day_vote([p[0], p[0], p[1], None]) is p[0] and not p[0].alive
    p = _players(W, S, V, V)
    assert day_vote([p[0], p[1], None, None]) is None and all(q.alive for q in p)
    assert day_vote([None, None]) is None  # every vote invalid: abstentions


def test_win_conditions():
    p = _players(W, S, V, V)
    assert winner(p) is None
    p[0].alive = False
    assert winner(p) is Side.VILLAGE  # every werewolf out
    p[0].alive, p[2].alive = True, False
    assert winner(p) is None  # 1 werewolf against 2
    p[3].alive = False
    assert winner(p) is Side.WEREWOLVES  # as many werewolves as the others


def test_an_invalid_vote_names_nobody_it_may_vote_for():
    p = _players(W, S, V)
    assert parse_vote("I abstain", p, p[2]) is None
    assert parse_vote("Uma Rossi, me", p, p[2]) is None  # only the voter itself
    assert parse_vote("Ada? no, P1", p, p[2]) is p[1]  # the last one named, by id


def _scripted(setup: Setup, seed: int, vote):
    """speak() for the game dealt from `seed`: every question names `vote(players, role, question)`;
    every speech is 'hello'. Returns it with the recorded (role, conversation text) calls, the players and
    the conversations as sent."""
    players = deal(setup, random.Random(seed))
    calls: list[tuple[Role, str]] = []
    sent: list[list[dict[str, str]]] = []

    def speak(role: Role, messages: list[dict[str, str]]) -> str:
        sent.append(messages)
        calls.append((role, "\n".join(m["content"] for m in messages)))
        question = messages[-1]["content"]
        return vote(players, role, question) if "Answer with" in question else "hello"

    speak.sent = sent
    return speak, calls, players


def _name(players, role):
    return next(p.name for p in players if p.role is role)


def test_the_seer_finds_the_werewolf_in_private_and_the_village_votes_it_out():
    def vote(players, role, prompt):
        if "werewolves kill" in prompt:
            return _name(players, V)
        return _name(players, W)  # the seer inspects the werewolf; everyone votes for it (the wolf abstains)

    speak, calls, players = _scripted(Setup(5, 1), 3, vote)
    res = play(Setup(5, 1), speak, random.Random(3))
    assert (res.winner, res.rounds, res.seer_found) == (Side.VILLAGE, 1, 1)
    assert res.rewards() == {Side.VILLAGE: 1.0, Side.WEREWOLVES: 0.0}
    assert res.invalid[W] == 1 and res.invalid[S] == 0 and res.invalid[V] == 0  # its vote for itself
    finding = f"{_name(players, W)} is a werewolf"
    assert [r for r, prompt in calls if finding in prompt] and all(r is S for r, prompt in calls if finding in prompt)
    assert not any(finding in line for line in res.transcript)  # never public
    wolf_prompts = [prompt for r, prompt in calls if r is W]
    assert all("secretly a werewolf" in prompt for prompt in wolf_prompts)
    assert not any("secretly a werewolf" in prompt for r, prompt in calls if r is not W)


def test_each_player_keeps_one_conversation_that_every_call_extends():
    """A player's next call re-sends its last one, reply included, plus one user turn: what the server's
    token merging needs to fold the player's calls into one sample. The first turn says who it is."""
    speak, calls, players = _scripted(Setup(7, 2, max_rounds=2), 8, lambda players, role, q: "I pass")
    play(Setup(7, 2, max_rounds=2), speak, random.Random(8))
    by_player: dict[str, list[list[dict[str, str]]]] = {}
    for messages in speak.sent:
        first = messages[0]["content"]
        who = next(p.pid for p in players if f"You are {p.name} ({p.pid})" in first)
        by_player.setdefault(who, []).append(messages)
    assert len(by_player) == 7 and sum(map(len, by_player.values())) == len(speak.sent)
    for convs in by_player.values():
        for before, after in zip(convs, convs[1:], strict=False):
            assert after[: len(before)] == before
            assert after[len(before)] == {"role": "assistant", "content": "hello" if "Say one" in before[-1]["content"] else "I pass"}
            assert len(after) == len(before) + 2 and after[-1]["role"] == "user"
    # what a player is told is not repeated: the night-1 line reaches each conversation once
    for convs in by_player.values():
        assert sum(m["content"].count("Night 1:") for m in convs[-1] if m["role"] == "user") == 1


def test_invalid_moves_are_abstentions_counted_and_the_werewolves_outlast_the_rounds():
    speak, calls, _ = _scripted(Setup(5, 1, max_rounds=2), 4, lambda *_: "I pass")
    res = play(Setup(5, 1, max_rounds=2), speak, random.Random(4))
    assert (res.winner, res.rounds) == (Side.WEREWOLVES, 2)  # nobody ever died
    assert res.invalid == res.moves and sum(res.moves.values()) == 2 * (1 + 1 + 5)
    assert res.transcript.count("Night 1: nobody died.") == 1 and "Day 2: the vote was tied; nobody is out." in res.transcript


def test_a_night_kill_that_evens_the_numbers_ends_the_game():
    def vote(players, role, prompt):
        return _name(players, V)

    speak, _, _ = _scripted(Setup(3, 1), 5, vote)
    res = play(Setup(3, 1), speak, random.Random(5))
    assert (res.winner, res.rounds) == (Side.WEREWOLVES, 1) and res.transcript[-1].endswith("was killed.")


def test_the_task_deals_distinct_reproducible_items_and_a_disjoint_held_out_set():
    task = get_task("werewolf")
    assert task.roles == ("village", "werewolves")
    a, b = task.dataset(30, 0), task.dataset(30, 0)
    assert a == b and len({it.id for it in a}) == 30
    train, held = split_items(task, 40, 10, seed=1)
    assert len(train) == 40 and not {it.id for it in train} & {it.id for it in held}


@pytest.mark.parametrize(("change", "match"), [
    ({"swarm": {"pool": {"batch_size": 3}}}, "multiple of 2"),
    ({"mix": {"werewolf": 0.5, "arithmetic": 0.5}}, "cannot join a mix"),
    ({"team": {"method": "hacpo", "agents": {"a": {"model": {"name": "tiny"}}, "b": {"model": {"name": "tiny"}}}}},
     "must be independent"),
    ({"team": {"agents": {"wolves": {"model": {"name": "tiny"}}, "village": {"model": {"name": "tiny"}}}}},
     "roles"),
])
def test_job_configs_that_cannot_play_werewolf_are_refused(change, match):
    with pytest.raises(ValueError, match=match):  # a ConfigError, inside pydantic's ValidationError
        TrainJob.model_validate({"task": "werewolf", **change})


SWARM = {
    "model": {"name": "tiny"}, "pool": {"batch_size": 2, "group_size": 2},
    "training": {"max_steps": 1, "lr": 1e-3, "mini_batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 0},
}


@pytest.mark.slow
def test_swarm_train_task_werewolf_trains_both_sides_of_one_shared_model(tmp_path):
    job = {"task": "werewolf", "eval_size": 1, "max_tokens": 4, "concurrency": 4, "swarm": SWARM}
    run = swarm_train(tmp_path, job)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["task"] == "werewolf" and summary["final_status"]["global_step"] == 1
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if "pg_loss" in m)
    assert step["episodes"] == 4  # one game x two sides (their own GRPO groups) x group size 2
    # each player's calls merge into one sample: at most one per seat of the two games (7 seats at most),
    # where a prompt per call gave one per call (about 35 per game)
    assert step["samples"] <= 2 * 7
    evals = {k: m[k] for m in metrics for k in m if k.startswith("eval_accuracy/")}
    assert set(evals) == {"eval_accuracy/village", "eval_accuracy/werewolves"}
    assert evals["eval_accuracy/village"] + evals["eval_accuracy/werewolves"] == 1.0  # zero-sum, self-play


@pytest.mark.slow
def test_a_team_trains_each_side_on_its_own_server(tmp_path, in_process):
    from engine.teams.train import train_team

    team = {"agents": {"village": {"model": {"name": "tiny"}}, "werewolves": {"model": {"name": "tiny", "seed": 1}}}}
    job = TrainJob.model_validate({"task": "werewolf", "eval_size": 1, "max_tokens": 4, "concurrency": 4,
                                   "swarm": {**SWARM, "pool": {"batch_size": 1, "group_size": 2}}, "team": team})
    summary = train_team(job, tmp_path / "run", in_process)
    assert {n: st["global_step"] for n, st in summary["final_status"].items()} == {"village": 1, "werewolves": 1}
    assert sum(summary["accuracy_after"].values()) == 1.0
    for side in ("village", "werewolves"):
        steps = [json.loads(line) for line in (tmp_path / "run" / "agents" / side / "metrics.jsonl").read_text().splitlines()]
        assert [(m["step"], m["episodes"]) for m in steps] == [(1.0, 2)]  # its own side's episodes only


@pytest.mark.slow
def test_a_game_aborts_on_both_servers_when_the_werewolves_server_dies(live_server):
    village_srv, wolf_srv = live_server(), live_server()
    setup, sampling = Setup(5, 1), {"temperature": 1.0, "max_tokens": 4}
    with village_srv.client() as village, wolf_srv.client() as wolves:

        def one(episodes, item):
            speak = side_speaker(episode_speaker(episodes, sampling))
            calls = []

            def flaky(role, prompt):
                calls.append(role)
                if len(calls) == 2:  # the seer's first move: the werewolves speak again by day
                    wolf_srv.close()
                return speak(role, prompt)

            return {s.value: r for s, r in play(setup, flaky, random.Random(0)).rewards().items()}

        with pytest.raises(Exception):  # noqa: B017 - whatever the dead server's connection raises
            play_grouped(clients_for(Mode.ADVERSARIAL, village, wolves), ["g"], 1, one, str)
        st = village.status()
        assert st["pool"]["episodes"] == 0 and st["episodes_live"] == 0 and st["episode_counts"]["aborted"] == 1


def _sampled_games(srv, concurrency: int) -> tuple[list[list[str]], dict]:
    """Two deals x 2 games, both sides on one tiny server at temperature 1: (every game's replies, sorted;
    the pool's held episode numbers)."""
    sampling = {"temperature": 1.0, "max_tokens": 4}
    games: list[list[str]] = []
    with srv.client() as c:

        def one(episodes, deal_seed):
            said: list[str] = []
            speak = episode_speaker(episodes, sampling)

            def record(side, prompt):
                said.append(reply := speak(side, prompt))
                return reply

            res = play(Setup(5, 1, max_rounds=1), side_speaker(record), random.Random(deal_seed))
            games.append(said)  # list.append is atomic: the games run in threads
            return {s.value: r for s, r in res.rewards().items()}

        play_grouped(clients_for(Mode.SHARED, c), [11, 12], 2, one, str, concurrency)
        held = c.status()["pool"]["held"]
    return sorted(games), held


@pytest.mark.slow
def test_grouped_games_are_numbered_in_their_group_and_sample_the_same_whatever_the_concurrency(live_server):
    """The r-th game of a deal is episode r on the server, so its calls draw from their own seeded streams:
    one game at a time and four at once (batches of other make-up) sample the same games. Unnumbered
    episodes fell back to the engine's one generator, whose draws follow arrival order."""
    from engine.config import SwarmConfig

    cfg = SwarmConfig(pool={"batch_size": 64, "group_size": 2}, model={"seed": 3})
    serial, held = _sampled_games(live_server(cfg), 1)
    together, _ = _sampled_games(live_server(cfg), 4)
    assert held == {f"{k}:{d}:{side}": [0, 1] for k, d in enumerate((11, 12)) for side in ("village", "werewolves")}
    assert serial == together
    assert len({tuple(g) for g in serial}) > 1  # sampled, not one greedy game four times
