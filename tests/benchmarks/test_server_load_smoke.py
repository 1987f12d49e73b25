"""benchmarks/server_load.py runs end to end at its smallest (a real `swarm serve`, a few episodes whose
clients all hang up once), its checks hold there, and they report planted violations (a check that cannot
fail proves nothing): a 5xx, an episode pooled twice, text the client never received, an aborted episode
pooled, a lost reply, memory over its bound; a slow /health is a missed target, not a violation."""

from __future__ import annotations

import copy
import random

import pytest
from tests_support import load_benchmark

load = load_benchmark("server_load")

MIB = 2**20


def _call(text: str, cut: bool = False, status: int | None = 200) -> dict:
    return {"stream": False, "hangup": cut, "cut": cut, "status": None if cut else status, "text": text, "error": None}


def _records():
    """Two accepted episodes (one with a cut-off call) and one aborted, as the clients and journal hold them."""
    episodes = [
        {"episode": 0, "episode_id": "ep-a", "statuses": [200, 200, 200, 200], "finish": "end", "accepted": True,
         "error": None, "calls": [_call("one"), _call("two")]},
        {"episode": 1, "episode_id": "ep-b", "statuses": [200, 200, 200], "finish": "end", "accepted": True,
         "error": None, "calls": [_call("par", cut=True), _call("three")]},
        {"episode": 2, "episode_id": "ep-c", "statuses": [200, 200, 200], "finish": "abort", "accepted": False,
         "error": None, "calls": [_call("four")]},
    ]

    def add(eid: str, *texts: str) -> dict:
        blocks = [{"text": "prompt", "trainable": False}] + [{"text": t, "trainable": True} for t in texts]
        return {"op": "add", "episode": {"episode_id": eid, "timelines": [{"blocks": blocks}]}}

    journal = [add("ep-a", "one", "two<|im_end|>"), add("ep-b", "three")]
    health = [{"t": 0.1 * i, "status": 200, "error": None, "latency_s": 0.01, "rss": 100 * MIB} for i in range(5)]
    return episodes, journal, health, {"idle": 90 * MIB, "final": 95 * MIB}


def _check(episodes, journal, health, rss):
    return load.check_load(episodes, journal, health, rss, rss_limit=200 * MIB, health_limit_s=1.0)


def test_check_load_holds_on_clean_records_and_reports_each_planted_violation():
    clean = _check(*_records())
    assert clean["violations"] == [] and clean["target_misses"] == []
    assert clean["figures"]["accepted"] == clean["figures"]["pooled"] == 2

    def planted(change) -> list[str]:
        records = copy.deepcopy(_records())
        change(*records)
        return _check(*records)["violations"]

    assert any("5xx" in v for v in planted(lambda e, j, h, r: h[2].update(status=503)))
    assert any("5xx" in v for v in planted(lambda e, j, h, r: e[0]["statuses"].append(500)))
    assert any("unanswered" in v for v in planted(lambda e, j, h, r: h[1].update(status=None, error="ReadTimeout")))
    assert any("more than once" in v for v in planted(lambda e, j, h, r: j.append(copy.deepcopy(j[0]))))
    # the cut-off call of ep-b recorded anyway: its text, and more, was never received whole
    cut_trained = planted(lambda e, j, h, r: j[1]["episode"]["timelines"][0]["blocks"].append(
        {"text": "partial text never delivered", "trainable": True}))
    assert any("did not receive" in v for v in cut_trained)
    assert any("not accepted" in v for v in planted(lambda e, j, h, r: j.append(
        {"op": "add", "episode": {"episode_id": "ep-c", "timelines": []}})))
    assert any("not in the pool journal" in v for v in planted(lambda e, j, h, r: j.pop(1)))
    assert any("missing from the pooled episode" in v for v in planted(
        lambda e, j, h, r: j[0]["episode"]["timelines"][0]["blocks"].pop()))
    assert any("failed" in v for v in planted(lambda e, j, h, r: e[0]["calls"][0].update(status=400)))
    assert any("peak RSS" in v for v in planted(lambda e, j, h, r: h[3].update(rss=300 * MIB)))

    records = _records()
    records[2][4]["latency_s"] = 1.5
    slow = _check(*records)
    assert slow["violations"] == [] and "1.500 s above the 1 s target" in slow["target_misses"][0]


def test_plans_are_seeded_and_mix_what_they_should():
    a = load.plan_episodes(3, 40, 4, stream_share=0.5, hangup_share=0.5, abort_share=0.2)
    assert a == load.plan_episodes(3, 40, 4, stream_share=0.5, hangup_share=0.5, abort_share=0.2)
    calls = [c for p in a for c in p["calls"]]
    assert {c["stream"] for c in calls} == {True, False}
    cuts = [c["hangup"] for c in calls if c["hangup"]]
    assert any("after_chunks" in h for h in cuts) and any("after_s" in h for h in cuts)
    assert all(sum(1 for c in p["calls"] if c["hangup"]) <= 1 for p in a)
    assert {p["finish"] for p in a} == {"end", "abort"}
    assert [(p["task_id"], p["index"]) for p in a[:5]] == [("load-0", 0), ("load-0", 1), ("load-0", 2), ("load-0", 3), ("load-1", 0)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_small_load_runs_and_its_checks_hold_and_catch_a_planted_defect(tmp_path):
    args = load.parse_args(["--episodes", "6", "--calls", "2", "--hangup-share", "1", "--seed", "1"])
    run = load.run_load(args, tmp_path)
    limit = run["rss"]["idle"] + args.rss_headroom_mib * MIB
    # The /health target is a timing figure: not asserted on a loaded test machine (a generous limit here).
    checked = load.check_load(run["episodes"], run["journal"], run["health"], run["rss"], rss_limit=limit,
                              health_limit_s=3600.0)
    assert checked["violations"] == [], checked
    f = checked["figures"]
    assert f["health_probes"] > 0 and f["pooled"] == f["accepted"] > 0
    assert f["hangups_mid_stream"] + f["hangups_mid_request"] >= 1, f  # the clients did hang up
    assert run["audit"]["ok"], run["audit"]

    # Planted on the real records: a cut-off call trained after all (its partial text and more), and an
    # episode journaled twice.
    journal = copy.deepcopy(run["journal"])
    cut = next(e for e in run["episodes"] if e["accepted"] and any(c["cut"] for c in e["calls"]))
    partial = next(c["text"] for c in cut["calls"] if c["cut"])
    rec = next(r for r in journal if r.get("op") == "add" and r["episode"]["episode_id"] == cut["episode_id"])
    rec["episode"]["timelines"][0]["blocks"].append({"text": partial + " and what followed", "trainable": True})
    journal.append(copy.deepcopy(random.Random(0).choice([r for r in journal if r.get("op") == "add"])))
    found = load.check_load(run["episodes"], journal, run["health"], run["rss"], rss_limit=limit,
                            health_limit_s=3600.0)["violations"]
    assert any("did not receive" in v for v in found), found
    assert any("more than once" in v for v in found), found
