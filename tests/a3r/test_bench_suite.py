"""Suite files and the metrics computed from a run's series (hand-computed values)."""

from __future__ import annotations

import pytest

from a3r.bench.metrics import Series, compute_metrics
from a3r.bench.suite import DEFAULT_SUITE, SUITES_DIR, BenchKind, Direction, MetricKind, load_suite
from a3r.exceptions import ConfigError


def test_shipped_suites_load():
    default = load_suite()
    assert [b.name for b in default.benchmarks] == [
        "arithmetic",
        "calculator-merge",
        "countdown",
        "server-throughput",
    ]
    assert default.benchmark("server-throughput").kind is BenchKind.THROUGHPUT
    assert default.metric("arithmetic", "seconds_per_step").direction is Direction.LOWER
    assert load_suite(SUITES_DIR / "tiny.yaml").benchmarks[0].model == "tiny"
    assert DEFAULT_SUITE.exists()


def _write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_bad_suites_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"benchmarks.0.metrics.0.min_effect"):
        load_suite(_write(tmp_path, "name: s\nbenchmarks: [{name: a, metrics: [{kind: final_reward}]}]\n"))
    with pytest.raises(ConfigError, match="cannot come from a throughput benchmark"):
        load_suite(
            _write(
                tmp_path,
                "name: s\nbenchmarks: [{name: a, kind: throughput, metrics: [{kind: final_reward, min_effect: 1}]}]\n",
            )
        )
    with pytest.raises(ConfigError, match="not a valid engine TrainJob"):
        load_suite(
            _write(
                tmp_path,
                "name: s\nbenchmarks: [{name: a, config: {eval_sise: 3}, metrics: [{kind: final_reward, min_effect: 1}]}]\n",
            )
        )
    with pytest.raises(ConfigError, match="must not set"):
        load_suite(
            _write(
                tmp_path,
                "name: s\nbenchmarks: [{name: a, config: {seed: 3}, metrics: [{kind: final_reward, min_effect: 1}]}]\n",
            )
        )
    with pytest.raises(ConfigError, match="cannot read suite"):
        load_suite(tmp_path / "missing.yaml")


def test_train_job_fills_fixed_fields():
    b = load_suite(SUITES_DIR / "tiny.yaml").benchmarks[0]
    job = b.train_job(7)
    assert job["seed"] == 7 and job["swarm"]["model"] == {"name": "tiny", "seed": 7}
    assert job["swarm"]["training"]["max_steps"] == 2 and job["swarm"]["training"]["checkpoint_every"] == 0
    assert job["swarm"]["pool"] == {"batch_size": 2, "group_size": 2}


def test_metrics_from_series_match_hand_computation():
    suite = load_suite()
    specs = suite.benchmark("arithmetic").metrics
    series = {
        Series.EVAL: [(0, 0.2), (4, 0.5)],
        Series.EVAL_T: [(0, 20.0), (4, 70.0)],
        Series.REWARD: [(1, 0.1), (2, 0.3), (3, 0.4), (4, 0.6)],
        Series.TOKENS: [(1, 100.0), (2, 120.0), (3, 90.0), (4, 100.0)],
        # step lines arrived 5, 6, 4 and 10 s after the previous anchor
        Series.STEP_T: [(1, 25.0), (2, 31.0), (3, 35.0), (4, 45.0)],
        Series.PEAK_RSS: [(4, 1234.0)],
    }
    got = compute_metrics(specs, series)
    assert got["final_reward"] == pytest.approx(0.5)  # k=2: (0.4 + 0.6) / 2
    assert got["reward_auc"] == pytest.approx(0.35)  # (0.1 + 0.3 + 0.4 + 0.6) / 4
    assert got["heldout_accuracy"] == pytest.approx(0.5)
    assert got["seconds_per_step"] == pytest.approx(5.5)  # median(5, 6, 4, 10)
    assert got["trained_tokens_per_second"] == pytest.approx(20.0)  # median(20, 20, 22.5, 10)
    assert got["peak_memory_mb"] == 1234.0


def test_missing_inputs_give_none_not_zero():
    specs = load_suite().benchmark("arithmetic").metrics
    got = compute_metrics(specs, {Series.EVAL: [(0, 0.2)], Series.STEP_T: [(1, 3.0)]})
    assert got["heldout_accuracy"] is None  # only the pre-training evaluation
    assert got["seconds_per_step"] is None  # one anchor, no gap
    assert got["final_reward"] is None and got["peak_memory_mb"] is None
    assert MetricKind.LATENCY_P50_MS.value == "latency_p50_ms"
