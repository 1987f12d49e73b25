"""benchmarks/heldout_size.py's analysis, on run dirs with hand-made per-item scores."""

from __future__ import annotations

import math

import pytest

from benchmarks.heldout_size import analyse, prefix_scores
from benchmarks.run_cost import build_job
from engine.training.metrics import MetricsLog


def _run(tmp_path, name, before, after):
    log = MetricsLog(tmp_path / name)
    ids = [f"i{k}" for k in range(len(before))]
    log.write_eval_scores(0, "eval_accuracy", ids, before)
    log.write_eval_scores(0, "eval_accuracy/other", ids, [0.0] * len(ids))  # another key: ignored
    log.write_eval_scores(20, "eval_accuracy", ids, after)
    return tmp_path / name


def test_a_smaller_held_out_set_is_scored_on_the_prefix(tmp_path):
    run = _run(tmp_path, "r", [1, 0, 0, 0], [1, 1, 0, 1])
    assert prefix_scores(run, [2, 4]) == {2: (0.5, 1.0), 4: (0.25, 0.75)}


def test_a_run_without_per_item_scores_is_refused_with_the_fix(tmp_path):
    (tmp_path / "old").mkdir()
    with pytest.raises(SystemExit, match="per-item scores"):
        prefix_scores(tmp_path / "old", [2])


def test_sd_and_cost_per_size_by_hand(tmp_path):
    # three seeds; before is the same untrained model everywhere, the finals differ by seed
    finals = [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]
    scores = [prefix_scores(_run(tmp_path, f"s{k}", [0, 0, 0, 0], f), [2, 4]) for k, f in enumerate(finals)]
    job = build_job("default", ["eval_size=4"])
    rows = analyse(scores, [2, 4], job, effect=0.5)
    by = {r["items"]: r for r in rows}
    # 2 items: finals 1.0, 0.5, 1.0 -> sd sqrt(1/12); 4 items: 0.5, 0.25, 0.75 -> sd 0.25
    assert by[2]["sd_final"] == pytest.approx(math.sqrt(1 / 12), rel=1e-12)
    assert by[4]["sd_final"] == pytest.approx(0.25, rel=1e-12)
    assert by[4]["sd_gain"] == pytest.approx(0.25, rel=1e-12)  # before is 0 everywhere
    lo, hi = by[4]["sd_final_ci"]
    assert lo < 0.25 < hi
    # more items cost more evaluation seconds, and the answer costs 2 arms x seeds x run
    assert by[4]["eval_s"] > by[2]["eval_s"] > 0
    for r in rows:
        assert r["answer_s"] == pytest.approx(2 * r["seeds_per_arm"] * r["run_s"])
