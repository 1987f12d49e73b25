"""`vibe train` / `vibe status` / `vibe attach`: gated on the check, run in real tmux on a private socket,
reward per step on disk, and the no-variance flag raised while the run is still going."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from tests_support import tiny_vibe_job as _tiny

from vibe.cli import main
from vibe.config import VibeJob
from vibe.layout import ClientDir
from vibe.progress import flat_streak, read_rewards, read_status, replayed_rows
from vibe.train_session import run_dir, session_name

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


@pytest.fixture
def tmux_socket(monkeypatch):
    name = f"vibe-test-{time.monotonic_ns()}"
    monkeypatch.setenv("VIBE_TMUX_SOCKET", name)
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def test_flat_streak_counts_the_latest_steps_without_variance():
    rec = [{"groups": 2, "flat_groups": 2}, {"groups": 2, "flat_groups": 1}, {"groups": 2, "flat_groups": 2},
           {"groups": 2, "flat_groups": 2}]
    assert flat_streak(rec) == 2
    assert flat_streak(rec[:2]) == 0 and flat_streak([]) == 0
    assert flat_streak([{"groups": 0, "flat_groups": 0}]) == 0  # no groups is not "flat"


def test_steps_trained_from_replayed_episodes_get_their_own_rows():
    """A resumed run: the server trained step 3 from its journal and step 4 from this client's plays while the
    client waited once; step 3 gets a row with the server's figures, so the log has no gap."""
    metrics = [{"step": 2.0, "reward_mean": 0.1}, {"step": 3.0, "reward_mean": 0.25, "reward_std": 0.5, "episodes": 8.0},
               {"step": 4.0, "reward_mean": 0.4}]
    (row,) = replayed_rows(2, 4, metrics)
    assert row == {"step": 3, "reward_mean": 0.25, "reward_std": 0.5, "episodes": 8, "failed": 0, "groups": 0,
                   "flat_groups": 0, "components": {}, "replayed": True}
    assert replayed_rows(2, 3, metrics) == []  # one step per wait: nothing was replayed
    assert replayed_rows(2, 4, metrics[2:]) == []  # no server figures for step 3: no invented row
    assert flat_streak([{"groups": 2, "flat_groups": 2}, row]) == 0  # a replayed row is not "flat"


@pytest.mark.slow
@pytest.mark.timeout(900)  # real servers and training: 168-302 s in a suite beside a 2-slot sweep on 2 cores; 300 s cut one
def test_a_restarted_run_logs_the_step_its_server_trained_from_the_journal_and_plays_the_next(qa_client, tmp_path):
    """The resume defect end to end: a stopped run left a full batch of accepted, untrained episodes in the
    pool journal. On restart the server trains them as step 1 by itself; the trainer waits for that,
    gives step 1 a replayed row with the server's figures, and its own plays make step 2 (not step 1)."""
    from engine.jobs import ServerProcess
    from engine.training.metrics import read_run_metrics
    from vibe.jsonl import read_jsonl
    from vibe.layout import CLIENT_FILE, TRAIN_FILE
    from vibe.loader import contract_function, load_module
    from vibe.play import play_task
    from vibe.training_loop import _server_config, train

    job = _tiny(qa_client, batch=2, group=2)
    rdir = tmp_path / "run"
    rdir.mkdir()
    run = contract_function(load_module(qa_client, CLIENT_FILE), CLIENT_FILE)
    tasks = read_jsonl(qa_client / TRAIN_FILE)[0]
    # the interrupted invocation: step 1's plays accepted; a server that wants twice as many tasks never trains
    cfg = _server_config(job, rdir, steps=2, groups_per_task=1)
    server = ServerProcess(rdir, log_path=rdir / "first.log")
    try:
        with server.client("first") as client:
            client.configure(cfg.model_copy(update={"pool": cfg.pool.model_copy(update={"batch_size": 4})}))
            client.start(wait=True)
            for k in range(2):
                for _ in range(2):
                    play_task(client, run, [], f"s0:{k}:{tasks[k]['id']}", tasks[k], job.sampling)
            assert client.status()["global_step"] == 0
    finally:
        server.stop()

    train(qa_client, rdir, steps=2)
    assert read_status(rdir)["state"] == "done"
    rows = read_rewards(rdir)
    assert [(r["step"], r.get("replayed", False)) for r in rows] == [(1, True), (2, False)]
    assert rows[0]["episodes"] == 4 and rows[1]["episodes"] == 4 and rows[1]["groups"] == 2
    trained = [m for m in read_run_metrics(rdir) if "episodes" in m]
    assert [(int(m["step"]), m["episodes"]) for m in trained] == [(1, 4.0), (2, 4.0)]  # every episode once


def test_a_restart_does_not_play_again_what_the_journal_gave_back_to_a_batch_not_yet_full(qa_client, tmp_path):
    """A run stopped after one of step 1's two groups was played: the restarted server replays that group
    from its journal but has no full batch. The trainer plays only the other group, so step 1 trains every
    episode once (playing the held ones again would be refused: an index names one episode)."""
    from engine.jobs import ServerProcess
    from engine.training.metrics import read_run_metrics
    from vibe.jsonl import read_jsonl
    from vibe.layout import CLIENT_FILE, TRAIN_FILE
    from vibe.loader import contract_function, load_module
    from vibe.play import play_task
    from vibe.training_loop import _server_config, train

    job = _tiny(qa_client, batch=2, group=2)
    rdir = tmp_path / "run"
    rdir.mkdir()
    run = contract_function(load_module(qa_client, CLIENT_FILE), CLIENT_FILE)
    task = read_jsonl(qa_client / TRAIN_FILE)[0][0]
    server = ServerProcess(rdir, log_path=rdir / "first.log")
    try:
        with server.client("first") as client:
            client.configure(_server_config(job, rdir, steps=1, groups_per_task=1))
            client.start(wait=True)
            for r in range(2):  # step 1's first group, as the trainer numbers it
                play_task(client, run, [], f"s0:0:{task['id']}", task, job.sampling, index=r)
            assert client.status()["global_step"] == 0
    finally:
        server.stop()

    train(qa_client, rdir, steps=1)
    assert read_status(rdir)["state"] == "done"
    rows = read_rewards(rdir)
    assert [(r["step"], r["episodes"], r["groups"]) for r in rows] == [(1, 2, 1)]  # the group played now
    trained = [m for m in read_run_metrics(rdir) if "episodes" in m]
    assert [(int(m["step"]), m["episodes"]) for m in trained] == [(1, 4.0)]  # both groups, each once


def _recording(run, said: list[str]):
    """`run` with every reply its client receives appended to `said`."""

    def wrapped(llm, model, task, sampling):
        create = llm.chat.completions.create

        def spy(**kw):
            out = create(**kw)
            said.append(out.choices[0].message.content)
            return out

        llm.chat.completions.create = spy
        return run(llm, model, task, sampling)

    return wrapped


def test_a_group_of_plays_samples_from_its_numbered_streams(qa_client, live_server):
    """vibe's plays of one task are episodes 0..K-1 of its group (the index each play carries), so
    their calls draw from seeded streams: the same plays on a second server, arriving in another order,
    sample the same replies. Plays sent without numbers drew from the engine's one generator in arrival
    order, so a play's replies depended on which play came first."""
    from engine.config import SwarmConfig
    from vibe.jsonl import read_jsonl
    from vibe.layout import CLIENT_FILE, TRAIN_FILE
    from vibe.loader import contract_function, load_module
    from vibe.play import play_task

    run = contract_function(load_module(qa_client, CLIENT_FILE), CLIENT_FILE)
    task = read_jsonl(qa_client / TRAIN_FILE)[0][0]
    sampling = {"temperature": 1.0, "max_tokens": 6}
    cfg = SwarmConfig(pool={"batch_size": 64, "group_size": 3}, model={"seed": 7})
    replies = []
    for order in ([0, 1, 2], [2, 0, 1]):  # a second server, the plays arriving in another order
        said: dict[int, list[str]] = {k: [] for k in order}
        with live_server(cfg).client() as client:
            for k in order:
                play_task(client, _recording(run, said[k]), [], "t", task, sampling, index=k)
            assert sorted(client.status()["pool"]["held"]["t"]) == [0, 1, 2]
        replies.append(said)
    assert replies[0] == replies[1]
    assert len({tuple(r) for r in replies[0].values()}) > 1  # sampled, not one greedy reply three times


def test_train_refuses_a_negative_warm_start(qa_client, tmux_socket, capsys):
    assert main(["train", str(qa_client), "--steps", "1", "--warm-start", "-1"]) == 2
    assert "--warm-start must be 0 (none) or a number of supervised steps" in capsys.readouterr().err


def test_train_refuses_a_client_whose_check_fails(qa_client, tmux_socket, capsys):
    (qa_client / "reward.py").write_text("def score(task, response):\n    return {'any': 1.0}\n")
    assert main(["train", str(qa_client), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "vibe check does not pass" in err and "hackable_empty" in err
    assert subprocess.run(["tmux", "-L", tmux_socket, "has-session", "-t", session_name(ClientDir.open(qa_client))],
                          capture_output=True).returncode != 0
    assert main(["status", str(qa_client)]) == 0 and "not training" in capsys.readouterr().out
    assert main(["attach", str(qa_client)]) == 2 and "no live session" in capsys.readouterr().err


@pytest.mark.slow
def test_offline_new_check_and_train_in_tmux_with_rewards_per_step_and_a_live_flat_flag(sandboxed, tmp_path, tmux_socket, capsys):
    """The offline path end to end: `vibe new` picks the QA template, `vibe train` checks it (dry run and a
    training step that changes the weights) and trains it in tmux on the tiny model."""
    qa_client = tmp_path / "arith"
    assert main(["new", "Answer arithmetic questions with a number", "--out", str(qa_client), "--no-check"]) == 0
    said = capsys.readouterr().out
    assert "no LLM endpoint configured" in said and "offline template 'qa'" in said
    assert (qa_client / "vibe.yaml").read_text().startswith("name: arith\ndescription: Answer arithmetic")
    job = _tiny(qa_client, batch=2, group=2)
    (qa_client / "vibe.yaml").write_text(VibeJob.model_validate(job.model_dump() | {"flat_steps": 2}).to_yaml())
    cd = ClientDir.open(qa_client)
    assert main(["train", str(qa_client), "--steps", "3"]) == 0
    assert "checking the client first" in capsys.readouterr().out
    report = json.loads((qa_client / ".vibe" / "check.json").read_text())
    assert report["stats"]["max_weight_change"] > 0  # the check's step trained on the recorded episodes
    assert report["stats"]["groups"] == 2 and report["stats"]["components"]["correct"]["std"] == 0.0
    assert not (qa_client / ".vibe" / "check-run" / "checkpoints").exists()  # the check cleans up its weights
    windows = subprocess.run(["tmux", "-L", tmux_socket, "list-windows", "-t", session_name(cd), "-F", "#W"],
                             capture_output=True, text=True).stdout.split()
    assert windows == ["client", "server"]
    assert main(["train", str(qa_client), "--steps", "3"]) == 2
    assert "already training" in capsys.readouterr().err

    rdir = run_dir(cd)
    flagged_while_running = False
    deadline = time.monotonic() + 240
    while (st := read_status(rdir)) is None or st["state"] == "running":
        assert time.monotonic() < deadline, (rdir / "client.log").read_text()[-2000:]
        flagged_while_running |= bool(st and st["flags"])
        time.sleep(0.2)
    assert st["state"] == "done", st
    rewards = read_rewards(rdir)
    assert [r["step"] for r in rewards] == [1, 2, 3]
    assert all(r["groups"] == 2 and r["episodes"] == 4 and "correct" in r["components"] for r in rewards)
    # tiny's random words never answer right, so every group is flat: flagged at step 2 of 3, not after
    assert st["flags"][0]["code"] == "no_reward_variance" and st["flags"][0]["step"] == 2
    assert flagged_while_running
    assert main(["status", str(qa_client)]) == 0
    out = capsys.readouterr().out
    assert "done, step 3/3" in out and "FLAG no_reward_variance (step 2)" in out and "   3        0.000" in out


def test_a_training_run_whose_server_cannot_boot_says_why(qa_client, tmp_path, capsys):
    from vibe.training_loop import train

    text = (qa_client / "vibe.yaml").read_text()
    (qa_client / "vibe.yaml").write_text(text.replace("name: smollm2-135m", "name: no-such-model-dir"))
    rdir = tmp_path / "run"
    rdir.mkdir()
    with pytest.raises(SystemExit) as e:
        train(qa_client, rdir, steps=1)
    assert e.value.code == 1
    st = read_status(rdir)
    assert st["state"] == "failed" and "no-such-model-dir" in st["error"]
    out = capsys.readouterr().out
    assert "[vibe] training stopped" in out and "Traceback" not in out
    assert (rdir / "client.traceback").is_file() and oct((rdir / "admin_token").stat().st_mode)[-3:] == "600"


@pytest.mark.slow
def test_adversarial_training_runs_each_side_on_its_own_server(tmp_path, spy_client, capsys):
    """The trainer with second_server_roles: two servers, spies' episodes on the second, a step on both,
    both starting from the supervised warm start on the game's gold descriptions."""
    from vibe.training_loop import train

    root = spy_client(tmp_path / "spy", adversarial=True)
    _tiny(root, batch=1, group=2)
    rdir = tmp_path / "run"
    rdir.mkdir()
    train(root, rdir, steps=1, warm_start_steps=2)
    assert read_status(rdir)["state"] == "done"
    warm = json.loads((rdir / "warm_start" / "supervised.json").read_text())
    assert warm["model"] == "tiny" and warm["steps"] == 2 and warm["pairs"] == len(
        (root / "data" / "train.jsonl").read_text().splitlines())
    [rec] = read_rewards(rdir)
    assert rec["step"] == 1 and rec["episodes"] == 4 and rec["groups"] == 2  # 2 games x 2 roles
    # each side's own figures; one side wins each game, so the sides' win means add up to the win weight
    assert set(rec["roles"]) == {"civilian", "spy"}
    assert rec["roles"]["civilian"]["win"]["mean"] + rec["roles"]["spy"]["win"]["mean"] == pytest.approx(0.5)
    for log, run in (("server.log", rdir), ("server-2.log", rdir / "server-2")):
        assert (rdir / log).is_file()
        metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [m["episodes"] for m in metrics if "episodes" in m] == [2.0]  # each side's own 2 episodes
    out = capsys.readouterr().out
    assert "2 server(s) ROLLING" in out and "server 1: civilian; server 2: spy" in out
    assert f"ROLLING at step 0: {(rdir / 'warm_start').resolve()}" in out  # both servers start from it
    assert "warm start done: nll" in out


@pytest.mark.slow
def test_a_play_that_hangs_in_training_is_given_up_and_named(qa_client, tmp_path, capsys):
    """The per-episode timeout of `vibe train`: the first task's plays never end; the run stops and names
    that task (plays are reported in order, so it comes first however slow the machine makes the others)."""
    from vibe.training_loop import train

    job = _tiny(qa_client, batch=2, group=2)
    (qa_client / "vibe.yaml").write_text(VibeJob.model_validate(job.model_dump() | {"episode_timeout_s": 10}).to_yaml())
    hang_id = json.loads((qa_client / "data" / "train.jsonl").read_text().splitlines()[0])["id"]
    client = (qa_client / "client.py").read_text()
    (qa_client / "client.py").write_text(client + (
        "\n_run = run\n"
        "def run(llm, model, task, sampling):\n"
        "    import time\n"
        f"    while task['id'] == {hang_id!r}:\n"
        "        time.sleep(1)\n"
        "    return _run(llm, model, task, sampling)\n"))
    rdir = tmp_path / "run"
    rdir.mkdir()
    with pytest.raises(SystemExit):
        train(qa_client, rdir, steps=1)
    st = read_status(rdir)
    assert st["state"] == "failed" and f"first: task s0:0:{hang_id}: TimeoutError: the play did not end within 10 s" in st["error"]
    assert "step 1:" in st["error"]
