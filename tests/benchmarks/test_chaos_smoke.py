"""benchmarks/chaos.py runs end to end at its smallest (one job trial, two kills), so the chaos benchmark
cannot rot unnoticed; and its checks catch a planted duplicate (a check that cannot fail proves nothing).
The campaign trials cost minutes each on the tiny model and run only in the committed benchmark run. The
undisturbed reference is the session's `chaos_job_reference` (the reproducibility tests compare with it
too), passed with --reference."""

from __future__ import annotations

import json
import shutil

import pytest
from tests_support import load_benchmark

chaos = load_benchmark("chaos")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_one_job_trial_runs_kills_and_checks(tmp_path, chaos_job_reference):
    out = tmp_path / "chaos.json"
    md = tmp_path / "chaos.md"
    work = tmp_path / "work"
    result = chaos.main(["--job-trials", "1", "--job-kills", "2", "--campaign-trials", "0", "--work", str(work),
                         "--out", str(out), "--md", str(md), "--reference", str(chaos_job_reference)])
    (trial,) = result["trials"]
    assert trial["kind"] == "job" and len(trial["events"]) == 2
    assert all(e["kind"] in chaos.JOB_KINDS for e in trial["events"])
    assert trial["violations"] == [], trial
    summary = json.loads(out.read_text())["summary"]
    assert summary["kill_events"] == sum(trial["kills"].values()) and summary["violations"] == 0
    assert "kill events, 0 violations" in md.read_text()

    # The checks see a planted defect: a step's metrics logged twice, an episode accepted twice.
    reference = chaos_job_reference
    planted = tmp_path / "planted"
    shutil.copytree(reference, planted)
    assert chaos.check_job_run(planted, reference) == []
    rows = (planted / "metrics.jsonl").read_text().splitlines()
    train_row = next(r for r in rows if '"pg_loss"' in r)
    (planted / "metrics.jsonl").write_text("\n".join([*rows, train_row]) + "\n")
    journal = (planted / "pool.journal.jsonl").read_text().splitlines()
    add = next(r for r in journal if '"op": "add"' in r)
    (planted / "pool.journal.jsonl").write_text("\n".join([*journal, add]) + "\n")
    found = chaos.check_job_run(planted, reference)
    assert any("metric rows" in v for v in found), found
    assert any("accepted more than once" in v for v in found), found
    assert any("metrics differ" in v for v in found), found


def test_schedules_are_seeded_and_campaigns_spread_among_jobs():
    import random

    a = chaos._schedule(random.Random(1), chaos.CAMPAIGN_KINDS, 5, 3.0, 30.0)
    assert a == chaos._schedule(random.Random(1), chaos.CAMPAIGN_KINDS, 5, 3.0, 30.0)
    assert all(k in chaos.CAMPAIGN_KINDS and 3.0 <= d <= 30.0 for k, d in a)
    order = chaos.interleave(4, 2)
    assert sorted(order) == sorted([("job", i) for i in range(4)] + [("campaign", 0), ("campaign", 1)])
    assert order[0] == ("campaign", 0) and order.index(("campaign", 1)) == 3


def test_summary_counts_only_kills_that_hit():
    trials = [
        {"kind": "job", "trial": 0, "kills": {"server": 2}, "violations": [],
         "events": [{"kind": "server", "hit": True}, {"kind": "server", "hit": True}, {"kind": "client", "hit": False}]},
        {"kind": "campaign", "trial": 0, "kills": {"tmux": 1}, "violations": ["x"],
         "events": [{"kind": "tmux", "hit": True}]},
    ]
    s = chaos.summarize(trials)
    assert s["kill_events"] == 3 and s["kills_per_process"]["server"] == 2 and s["kills_per_process"]["client"] == 0
    assert s["skipped_per_process"] == {"client": 1} and s["violations"] == 1
    assert s["trials_with_violations"] == ["campaign 0"]
