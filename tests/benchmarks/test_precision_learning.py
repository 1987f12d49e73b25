"""benchmarks/precision_learning.py: the paired comparison by hand, the alternating order, and the pipeline
on the tiny model (2 seeds x 2 dtypes, real `swarm serve` subprocesses): the bfloat16 runs recompute their
old log-probs and report the gap, the page and plot are written. Checks structure and statistics, never
speed."""

from __future__ import annotations

import json
import math

import pytest
from tests_support import load_benchmark

pl = load_benchmark("precision_learning")


def _run(before: float, after: float, wall: float, train: float, gap: float | None = None) -> dict:
    return {"before": before, "after": after, "wall_s": wall, "train_s": train, "old_logp_gap_mean": gap,
            "curve": [(0, before), (16, after)]}


def test_the_gain_difference_is_a_paired_t_interval_and_speedups_are_per_seed():
    runs = {
        "float32": {0: _run(0.2, 0.5, 400, 200), 1: _run(0.2, 0.6, 410, 210), 2: _run(0.3, 0.6, 390, 190)},
        "bfloat16": {0: _run(0.2, 0.6, 200, 100, 0.04), 1: _run(0.1, 0.5, 250, 105, 0.03), 2: _run(0.3, 0.5, 260, 95, 0.05)},
    }
    s = pl.summarise(runs, [0, 1, 2])
    # gains fp32 0.3, 0.4, 0.3; bf16 0.4, 0.4, 0.2: differences +0.1, 0, -0.1 (mean 0, sd 0.1, n 3)
    half = 4.302653 * 0.1 / math.sqrt(3)  # t(0.975, 2) from tables
    d = s["gain_bf16_minus_fp32"]
    assert d["mean"] == pytest.approx(0.0, abs=1e-12) and d["half_width"] == pytest.approx(half, abs=1e-6)
    assert s["speedup_wall"]["median"] == pytest.approx(410 / 250)  # per seed 2.0, 1.64, 1.5
    assert s["speedup_train"]["median"] == pytest.approx(2.0)  # 2.0, 2.0, 2.0
    assert s["bf16_old_logp_gap_mean"] == pytest.approx(0.04)
    assert s["by_dtype"]["float32"]["gain_mean"] == pytest.approx(1 / 3)


def test_the_dtype_that_runs_first_alternates_by_seed():
    assert pl.order(0) == ("float32", "bfloat16") and pl.order(1) == ("bfloat16", "float32") and pl.order(2) == pl.order(0)


def test_one_seed_is_refused():
    with pytest.raises(SystemExit):
        pl.parse_args(["--seeds", "0"])


@pytest.mark.slow
@pytest.mark.timeout(900)  # four tiny runs with their server subprocesses: ~100 s on a loaded 2-core machine
def test_a_tiny_comparison_runs_both_dtypes_and_reports_the_recomputed_gap(tmp_path):
    out = tmp_path / "prec"
    result = pl.main(["--model", "tiny", "--seeds", "0", "1", "--steps", "1", "--batch", "2", "--group", "2",
                      "--eval-size", "1", "--eval-every", "0", "--out", str(out), "--runs", str(tmp_path / "runs")])
    assert json.loads(out.with_suffix(".json").read_text())["summary"] == result["summary"]
    for suffix in (".md", ".png"):
        assert out.with_suffix(suffix).stat().st_size > 0
    for dtype in ("float32", "bfloat16"):
        for seed in ("0", "1"):
            run = result["runs"][dtype][seed]
            assert run["steps"] == 1 and run["train_s"] > 0 and 0 <= run["after"] <= 1
            # float32 takes the recorded log-probs (auto), bfloat16 recomputes them and reports the gap
            assert (run["old_logp_gap_mean"] is not None) is (dtype == "bfloat16")
    assert result["summary"]["gain_bf16_minus_fp32"]["n"] == 2
    assert "| bfloat16 |" in out.with_suffix(".md").read_text()
