"""The run dir's metrics log and its per-item evaluation scores."""

from __future__ import annotations

from engine.training.metrics import EVAL_SCORES_FILE, MetricsLog, read_eval_scores, read_run_metrics


def test_eval_scores_keep_item_order_and_the_last_record_of_a_reevaluated_step(tmp_path):
    log = MetricsLog(tmp_path)
    log.write_eval_scores(0, "eval_accuracy", ["3+4", "1*2"], [1.0, 0.0])
    log.write_eval_scores(5, "eval_accuracy", ["3+4", "1*2"], [0.0, 0.0])  # cut short by a crash...
    log.write_eval_scores(5, "eval_accuracy", ["3+4", "1*2"], [1.0, 1.0])  # ...and evaluated again
    log.write_eval_scores(5, "eval_accuracy/spy", ["g1"], [0.5])
    scores = read_eval_scores(tmp_path)
    assert scores == {
        (0, "eval_accuracy"): (["3+4", "1*2"], [1.0, 0.0]),
        (5, "eval_accuracy"): (["3+4", "1*2"], [1.0, 1.0]),
        (5, "eval_accuracy/spy"): (["g1"], [0.5]),
    }
    assert read_run_metrics(tmp_path) == [], "per-item scores stay out of the metrics A3R ingests"


def test_a_log_without_run_dir_writes_no_scores(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    MetricsLog(None).write_eval_scores(0, "eval_accuracy", ["a"], [1.0])
    assert not (tmp_path / EVAL_SCORES_FILE).exists() and read_eval_scores(tmp_path) == {}
