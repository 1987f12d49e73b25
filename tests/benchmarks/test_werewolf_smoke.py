"""benchmarks/werewolf.py runs end to end on the tiny model (2 seeds, both arms, one step each), so the
script that compares shared and non-shared parameters cannot rot unnoticed; it resumes (a rerun reuses
finished runs, retrains a killed one, refuses results of other settings); and its summary finds a planted
gain and no gain where none was planted. Checks structure and statistics, never speed."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from tests_support import load_benchmark

ww = load_benchmark("werewolf")


def _run(arm: str, seed: int, win: float) -> dict:
    return {"arm": arm, "seed": seed, "after": {"win_rate": win, "seer_finds_per_game": 0.5,
                                                "invalid_rate": {"werewolf": 0.5, "seer": 0.25, "villager": None}}}


def test_the_summary_catches_a_planted_gain_and_not_an_absent_one():
    baseline = {"win_rate": 0.25, "invalid_rate": {"werewolf": 0.5, "seer": 0.5, "villager": 0.5}}
    planted = [0.55, 0.6, 0.5, 0.65, 0.6]  # the shared arm gains ~0.33 on every seed
    noise = [0.3, 0.2, 0.25, 0.3, 0.2]  # the non-shared arm: the baseline, give or take
    runs = [_run("shared", k, w) for k, w in enumerate(planted)] + [_run("non-shared", k, w) for k, w in enumerate(noise)]
    s = ww.summarise(runs, baseline)
    shared, non_shared = s["gain_over_baseline"]["shared"], s["gain_over_baseline"]["non-shared"]
    assert shared["lo"] > 0 and shared["mean"] == pytest.approx(0.33)
    assert non_shared["lo"] < 0 < non_shared["hi"]  # no gain planted: the interval keeps 0
    assert s["shared_minus_non_shared"]["lo"] > 0 and s["shared_minus_non_shared"]["n"] == 5
    assert s["invalid_rate_by_role"]["shared"] == {"werewolf": 0.5, "seer": 0.25, "villager": None}


@pytest.mark.slow
def test_smoke_run_trains_both_arms_and_writes_the_page(tmp_path, in_process):
    """In-process servers (the script's default is `swarm serve` subprocesses: the same API, slower to start)."""
    out = tmp_path / "werewolf"
    result = ww.main(["--smoke", "--out", str(out), "--work", str(tmp_path / "runs")], in_process)
    assert json.loads(out.with_suffix(".json").read_text())["args"]["model"] == "tiny"
    assert sorted((r["arm"], r["seed"]) for r in result["runs"]) == [
        ("non-shared", 0), ("non-shared", 1), ("shared", 0), ("shared", 1)]
    for r in result["runs"]:
        assert len(r["train_win_rate"]) == 1 and r["after"]["games"] == 2 and 0 <= r["after"]["win_rate"] <= 1
    assert result["baseline"]["games"] == 2
    assert result["summary"]["gain_over_baseline"]["shared"]["n"] == 2
    text = out.with_suffix(".md").read_text()
    assert "shared - non-shared" in text and "| seer |" in text


def test_a_flag_given_beside_smoke_wins_over_the_smokes_setting():
    args = ww.parse_args(["--smoke", "--lr", "2e-3", "--seeds", "3"])
    assert (args.model, args.lr, args.seeds, args.steps) == ("tiny", 2e-3, 3, 1)
    assert ww.parse_args(["--smoke"]).lr == 1e-3


def test_a_result_saved_under_other_settings_is_refused_before_any_server_starts(tmp_path):
    """A finished run of --lr 1e-3 is not reused by a command of --lr 2e-3: the message names lr, both values,
    the folder and the fix, and no server starts."""
    work, results = tmp_path / "runs", tmp_path / "werewolf_runs"
    ww.save(ww.result_path(results, "non-shared", 1), ww.settings(ww.parse_args(["--smoke"])), {"arm": "non-shared", "seed": 1})

    def no_server(run_dir):
        raise AssertionError(f"a server started for {run_dir}")

    with pytest.raises(SystemExit) as refused:
        ww.main(["--smoke", "--lr", "2e-3", "--out", str(tmp_path / "werewolf"), "--work", str(work)], no_server)
    message = str(refused.value)
    assert "lr (0.001 there, 0.002 now)" in message and str(results / "non-shared-s1.json") in message
    assert "another --results" in message and "delete" in message
    assert "max_tokens" not in message  # only the settings that differ
    assert not (tmp_path / "werewolf.json").exists()


@pytest.mark.slow
def test_a_rerun_reuses_finished_runs_and_retrains_only_a_killed_one(tmp_path, in_process):
    """The smoke run once; the same command again starts no server and reports the same results, marked reused;
    a changed --lr is refused; a run dir without result.json (a killed run) is emptied and trained again alone."""
    started = []

    def counting(run_dir):
        started.append(run_dir.name)
        return in_process(run_dir)

    out, work = tmp_path / "werewolf", tmp_path / "runs"
    argv = ["--smoke", "--out", str(out), "--work", str(work)]
    first = ww.main(argv, counting)
    assert sorted(started) == ["fixed", "non-shared-s0", "non-shared-s1", "shared-s0", "shared-s1"]
    assert not first["baseline_reused"] and not any(r["reused"] for r in first["runs"])

    started.clear()
    again = ww.main(argv, counting)
    assert started == []  # nothing trained, not even the fixed opponent's server
    assert again["baseline_reused"] and all(r["reused"] for r in again["runs"])
    drop = lambda runs: [{k: v for k, v in r.items() if k != "reused"} for r in runs]  # noqa: E731
    assert drop(again["runs"]) == drop(first["runs"]) and again["baseline"] == first["baseline"]
    assert again["summary"] == first["summary"]
    assert json.loads(out.with_suffix(".json").read_text())["runs"][0]["reused"] is True
    assert "reused 4 of 4 runs and the baseline" in out.with_suffix(".md").read_text()

    with pytest.raises(SystemExit, match=r"lr \(0.001 there, 0.002 now\)"):
        ww.main([*argv, "--lr", "2e-3"], counting)
    assert started == []

    # The finished results live beside the page (to be committed), not in the scratch --work: a new
    # checkout without the scratch reuses them all.
    assert sorted(p.name for p in (tmp_path / "werewolf_runs").iterdir()) == [
        "baseline.json", "non-shared-s0.json", "non-shared-s1.json", "shared-s0.json", "shared-s1.json"]
    shutil.rmtree(work)
    assert ww.main(argv, counting)["summary"] == first["summary"] and started == []

    killed, result = work / "shared-s1", ww.result_path(tmp_path / "werewolf_runs", "shared", 1)
    result.unlink()
    killed.mkdir(parents=True)
    (killed / "server.log").write_text("from the killed run")
    (killed / "stale-checkpoint").write_text("from the killed run")
    third = ww.main(argv, counting)
    assert sorted(started) == ["fixed", "shared-s1"]
    assert not (killed / "stale-checkpoint").exists() and result.exists()
    assert {(r["arm"], r["seed"]): r["reused"] for r in third["runs"]} == {
        ("shared", 0): True, ("non-shared", 0): True, ("shared", 1): False, ("non-shared", 1): True}
    assert third["baseline_reused"]


@pytest.mark.slow
def test_a_run_killed_after_a_step_resumes_from_its_checkpoint_and_trains_only_the_rest(tmp_path, in_process):
    """Kill shared seed 0 of a 2-step smoke while it waits for step 2 (step 1 trained and checkpointed): the
    same command resumes it after step 1, keeps step 1's curve, trains step 2 alone, and deletes the run's
    checkpoints once its result is saved."""
    killed = []

    class KillAtStep2:
        def __init__(self, run_dir):
            self.inner, self.name = in_process(run_dir), run_dir.name

        def client(self, client_id):
            c = self.inner.client(client_id)
            if self.name == "shared-s0" and not killed:
                wait = c.wait_for_step

                def wait_or_die(step, **kw):
                    if step == 2:
                        killed.append(step)
                        raise KeyboardInterrupt  # what a killed session leaves: no result, a checkpoint of step 1
                    return wait(step, **kw)

                c.wait_for_step = wait_or_die
            return c

        def stop(self):
            if self.name == "shared-s0" and len(killed) == 1:
                # The server counts a step before it writes the step's checkpoint: let the write finish
                # (else the run rightly starts over), then end it as the kill would have.
                deadline = time.monotonic() + 120
                while ww.latest_checkpoint(run) is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                self.inner.srv.close()
                killed.append("closed")
            self.inner.stop()

    out, work = tmp_path / "werewolf", tmp_path / "runs"
    run = work / "shared-s0"
    argv = ["--smoke", "--steps", "2", "--out", str(out), "--work", str(work)]
    with pytest.raises(KeyboardInterrupt):
        ww.main(argv, KillAtStep2)
    progress = json.loads((run / ww.PROGRESS).read_text())["result"]["train_win_rate"]
    assert len(progress) == 1 and ww.latest_checkpoint(run) is not None
    assert not ww.result_path(tmp_path / "werewolf_runs", "shared", 0).exists()
    assert ww.resumable(run, ww.settings(ww.parse_args(argv))) == progress
    assert ww.resumable(run, {**ww.settings(ww.parse_args(argv)), "lr": 1.0}) == []  # other settings: start over

    result = ww.main(argv, KillAtStep2)
    shared0 = next(r for r in result["runs"] if (r["arm"], r["seed"]) == ("shared", 0))
    assert len(shared0["train_win_rate"]) == 2 and shared0["train_win_rate"][0] == progress[0]
    assert shared0["resumed_after_step"] == 1  # its wall_s is step 2's and the evaluation's only
    assert {r["resumed_after_step"] for r in result["runs"] if r is not shared0} == {0}
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
             if "pg_loss" in line]
    assert steps == [1.0, 2.0]  # step 1 trained once, by the killed run; step 2 by the resumed one
    assert not (run / "checkpoints").exists()


def test_a_server_killed_mid_run_is_a_message_naming_the_oom_killer_and_the_log(tmp_path):
    # A real subprocess killed with SIGKILL, as the kernel's out-of-memory killer ends a server.
    import signal
    import subprocess
    import sys

    class Killed:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    Killed.proc.send_signal(signal.SIGKILL)
    err = ww.server_died("shared seed 0", Killed(), tmp_path / "shared-s0", RuntimeError("disconnected"))
    text = str(err.code)
    assert "exited with code -9" in text and "out-of-memory" in text and str(tmp_path / "shared-s0" / "server.log") in text
    assert "the same command resumes" in text
