"""benchmarks/cocktail.py: the analysis on hand-made numbers (an interval computed by hand, a planted
cocktail - specialist difference found only where planted, seeds paired), the jobs' fairness rule, and the
pipeline end to end on the tiny model (2 seeds, 2 of the tasks: a cocktail of 2 steps and two 1-step specialists, real
`swarm serve` subprocesses): outputs written, finished runs reused, a run dir of other settings refused.
Checks structure and statistics, never speed."""

from __future__ import annotations

import json
import math

import pytest
from tests_support import load_benchmark

from a3r.analysis.stats import welch_interval

ck = load_benchmark("cocktail")


def _tab(cocktail: list[float], specialist: list[float]) -> dict:
    return {ck.COCKTAIL: dict(enumerate(cocktail)), ck.SPECIALIST: dict(enumerate(specialist)),
            "untrained": dict.fromkeys(range(len(cocktail)), 0.25)}


def test_an_arm_interval_is_the_t_interval_computed_by_hand():
    s = ck.summarise({"arithmetic": _tab([0.5, 0.6, 0.7], [0.5, 0.5, 0.8])})["arithmetic"]
    # mean 0.6, sd 0.1, n 3: half-width t(0.975, 2) * 0.1 / sqrt(3) with t(0.975, 2) = 4.302653 (tables)
    half = 4.302653 * 0.1 / math.sqrt(3)
    c = s[ck.COCKTAIL]
    assert c["mean"] == pytest.approx(0.6) and c["n"] == 3
    assert c["half_width"] == pytest.approx(half, abs=1e-6)
    assert (c["lo"], c["hi"]) == (pytest.approx(0.6 - half, abs=1e-6), pytest.approx(0.6 + half, abs=1e-6))
    # paired differences 0, 0.1, -0.1: mean 0, sd 0.1, the same half-width
    d = s["cocktail_minus_specialist"]
    assert d["mean"] == pytest.approx(0.0, abs=1e-12) and d["half_width"] == pytest.approx(half, abs=1e-6)
    assert s["untrained_mean"] == pytest.approx(0.25)


def test_a_planted_difference_is_reported_paired_by_seed_and_only_where_planted():
    specialist = [0.30, 0.70, 0.20, 0.60]  # seeds differ a lot from each other...
    planted = [x - 0.2 + e for x, e in zip(specialist, [0.01, -0.01, 0.02, -0.02], strict=True)]  # ...the gap does not
    unplanted = [x + e for x, e in zip(specialist, [0.02, -0.03, 0.01, -0.01], strict=True)]
    s = ck.summarise({"countdown": _tab(planted, specialist), "arithmetic": _tab(unplanted, specialist)})
    gap = s["countdown"]["cocktail_minus_specialist"]
    assert gap["mean"] == pytest.approx(-0.2) and gap["hi"] < 0  # the cocktail is worse, and the seeds show it
    # Unpaired (Welch), the seeds' spread hides the gap: only the pairing by seed finds it.
    assert welch_interval(planted, specialist).contains(0.0)
    none = s["arithmetic"]["cocktail_minus_specialist"]
    assert none["lo"] < 0 < none["hi"]


def test_only_seeds_both_arms_finished_are_paired():
    tab = _tab([0.5, 0.6, 0.7], [0.4, 0.5, 0.6])
    del tab[ck.SPECIALIST][1]
    s = ck.summarise({"arithmetic": tab})["arithmetic"]
    assert s["seeds"] == [0, 2] and s["cocktail_minus_specialist"]["mean"] == pytest.approx(0.1)
    assert s[ck.COCKTAIL]["n"] == 2


def test_identical_values_have_no_interval_and_the_page_says_so():
    iv = ck.interval([0.0, 0.0])
    assert iv["lo"] is None and iv["half_width"] is None
    assert "no interval: identical values" in ck._fmt(iv)


def test_accuracies_read_the_final_row_of_each_task():
    args = ck.parse_args(["--smoke"])
    mix, single = ck.train_job(args, 0, None), ck.train_job(args, 0, "countdown")
    rows = [{"step": 0, "eval_accuracy/arithmetic": 0.1, "eval_accuracy/countdown": 0.2, "eval_accuracy/calculator": 0.0},
            {"step": 2, "eval_accuracy/arithmetic": 0.9},  # a mid-run evaluation, not the end
            {"step": 3, "eval_accuracy/arithmetic": 0.3, "eval_accuracy/countdown": 0.4},
            {"step": 3, "eval_accuracy/countdown": 0.5}]  # a later row of a step wins (a resumed run)
    assert ck.accuracies(rows, mix) == {"arithmetic": {"before": 0.1, "after": 0.3},
                                        "countdown": {"before": 0.2, "after": 0.5},
                                        "calculator": {"before": 0.0, "after": None}}
    assert ck.accuracies([{"step": 0, "eval_accuracy": 0.5}, {"step": 1, "eval_accuracy": 0.75}], single) == {
        "countdown": {"before": 0.5, "after": 0.75}}


def test_every_task_gets_the_same_episodes_in_both_arms():
    args = ck.parse_args(["--model", "tiny", "--steps", "2", "--batch", "6", "--group", "4"])
    cocktail = ck.train_job(args, 1, None)
    assert cocktail.swarm.training.max_steps == 6 and cocktail.tasks_per_batch() == dict.fromkeys(ck.DEFAULT_TASKS, 2)
    for t in ck.DEFAULT_TASKS:
        spec = ck.train_job(args, 1, t)
        per_task = lambda job, t=t: job.swarm.training.max_steps * job.tasks_per_batch()[t] * job.swarm.pool.group_size  # noqa: E731
        assert per_task(spec) == per_task(cocktail) == 2 * 6 * 4
        assert spec.swarm.pool == cocktail.swarm.pool.model_copy(update={"client_share": spec.swarm.pool.client_share})
        assert (spec.seed, spec.swarm.model.seed) == (cocktail.seed, cocktail.swarm.model.seed) == (1, 1)
    with pytest.raises(SystemExit):
        ck.parse_args(["--batch", "4"])  # 4 tasks a batch cannot hold 3 tasks equally


SMOKE_TASKS = ("arithmetic", "calculator")  # a one-call task and the multi-turn one: 6 runs, not the default's 8


@pytest.mark.slow
@pytest.mark.timeout(900)  # real servers and training: 168-302 s (8 runs) in a suite beside a 2-slot sweep on 2 cores
def test_smoke_run_trains_every_arm_writes_the_outputs_and_reuses_finished_runs(tmp_path, capsys):
    out, runs = tmp_path / "cocktail", tmp_path / "runs"
    argv = ["--smoke", "--tasks", *SMOKE_TASKS, "--out", str(out), "--runs", str(runs)]
    result = ck.main(argv)
    for suffix in (".json", ".md", ".png"):
        assert out.with_suffix(suffix).stat().st_size > 0
    assert json.loads(out.with_suffix(".json").read_text())["args"]["model"] == "tiny"
    assert sorted((r["arm"], r["task"] or "", r["seed"]) for r in result["runs"]) == sorted(
        (arm, t, s) for s in (0, 1) for arm, t in [("cocktail", ""), *(("specialist", t) for t in SMOKE_TASKS)])
    assert not any(r["reused"] for r in result["runs"])
    for t in SMOKE_TASKS:
        row = result["summary"][t]
        assert row["seeds"] == [0, 1] and row["cocktail_minus_specialist"]["n"] == 2
        assert all(0 <= v <= 1 for arm in (ck.COCKTAIL, ck.SPECIALIST) for v in result["table"][t][arm].values())
        assert result["split_check"][t] == {"held_out_items": 2, "training_items_in_held_out": 0,
                                            "same_training_items_both_arms": True}
    assert "| calculator |" in out.with_suffix(".md").read_text()

    again = ck.main(argv)  # every run dir finished: nothing trains again, the same numbers come back
    assert all(r["reused"] for r in again["runs"]) and again["table"] == result["table"]

    capsys.readouterr()
    ck.main([*argv, "--dry-run"])
    assert capsys.readouterr().out.count("finished") == 6
    with pytest.raises(SystemExit, match="other settings"):
        ck.main([*argv, "--temperature", "0.5"])  # same run dirs, another setting: refused, not reused


def test_the_verdict_reads_each_task_from_its_intervals():
    specialist = [0.60, 0.70, 0.50, 0.65]
    s = ck.summarise({
        "arithmetic": _tab([x - 0.2 + e for x, e in zip(specialist, [0.01, -0.01, 0.02, -0.02], strict=True)], specialist),
        "countdown": _tab([x + e for x, e in zip(specialist, [0.02, -0.03, 0.01, -0.01], strict=True)], specialist),
        "calculator": _tab([0.25] * 4, [0.25] * 4),  # the untrained 0.25 in both arms: nothing learned
    })
    lines = dict(zip(s, ck.verdict(s), strict=True))
    assert "cocktail is behind the specialist by 0.200" in lines["arithmetic"]
    assert "no difference is shown" in lines["countdown"]
    half = s["countdown"]["cocktail_minus_specialist"]["half_width"]
    assert f"larger than {half:.3f}" in lines["countdown"]
    assert "neither arm is shown above the untrained 0.250" in lines["calculator"]
    # an arm whose interval reaches down to the untrained level is not called learned
    wide = ck.summarise({"arithmetic": _tab([0.2, 0.9], [0.3, 0.35])})
    assert "neither arm" in ck.verdict(wide)[0]
