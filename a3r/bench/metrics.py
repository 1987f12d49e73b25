"""Benchmark metrics from one run's logged series: pure functions, checked against hand-computed values.

A run's series are what its succeeded attempt logged (name -> [(step, value)], sorted by step): the
engine's per-step training lines (`reward_mean`, `tokens`, ... at steps 1..S), its held-out evaluation
(`eval_accuracy` at step 0 before training and at step S after), and what the bench harness adds
(`a3r/bench/harness.py`, names in its `Series`): arrival times of those lines and the job's peak memory, or the
throughput probe's figures.

Formulas (S training steps, r_s the mean training reward of step s):
- final_reward      = mean(r_s for the last k steps)                       (k clipped to S)
- reward_auc        = mean(r_1..r_S): the area under the reward curve divided by S, comparable across budgets
- heldout_accuracy  = eval_accuracy at the last step, only if that step is after training (> 0)
- seconds_per_step  = median of gaps between consecutive anchors, where anchors are the arrival times of
                      each training step's line, plus the end of the pre-training evaluation when there is
                      one (so a 1-step run still has a gap); server start-up is never counted
- trained_tokens_per_second = median over steps of tokens_s / gap_s
- peak_memory_mb, calls_per_second, generated_tokens_per_second, latency_p50_ms: as the harness logged them
A metric whose inputs are missing is None (reported as "not measured", never as 0).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from a3r.bench.harness import Series
from a3r.bench.suite import MetricKind, MetricSpec

__all__ = ["Series", "compute_metric", "compute_metrics"]

SeriesMap = Mapping[str, Sequence[tuple[int, float | None]]]


def _values(series: SeriesMap, name: str) -> list[tuple[int, float]]:
    return [(s, v) for s, v in series.get(name, ()) if v is not None]


def _last(series: SeriesMap, name: str) -> float | None:
    vals = _values(series, name)
    return vals[-1][1] if vals else None


def _gaps(series: SeriesMap) -> dict[int, float]:
    """step -> wall seconds it took (from the previous anchor to this step's line)."""
    anchors = {s: t for s, t in _values(series, Series.STEP_T) if s >= 1}
    before = [t for s, t in _values(series, Series.EVAL_T) if s == 0]
    if before:
        anchors[0] = before[0]
    steps = sorted(anchors)
    return {b: anchors[b] - anchors[a] for a, b in zip(steps, steps[1:], strict=False) if b >= 1}


def compute_metric(spec: MetricSpec, series: SeriesMap) -> float | None:
    """The value of one metric for one run, or None when the run did not log what it needs."""
    kind = spec.kind
    rewards = [v for s, v in _values(series, Series.REWARD) if s >= 1]
    if kind is MetricKind.FINAL_REWARD:
        return statistics.fmean(rewards[-spec.k :]) if rewards else None
    if kind is MetricKind.REWARD_AUC:
        return statistics.fmean(rewards) if rewards else None
    if kind is MetricKind.HELDOUT_ACCURACY:
        evals = _values(series, Series.EVAL)
        return evals[-1][1] if evals and evals[-1][0] > 0 else None
    if kind is MetricKind.SECONDS_PER_STEP:
        gaps = _gaps(series)
        return statistics.median(gaps.values()) if gaps else None
    if kind is MetricKind.TRAINED_TOKENS_PER_SECOND:
        gaps = _gaps(series)
        tokens = dict(_values(series, Series.TOKENS))
        rates = [tokens[s] / g for s, g in gaps.items() if s in tokens and g > 0]
        return statistics.median(rates) if rates else None
    direct = {
        MetricKind.PEAK_MEMORY_MB: Series.PEAK_RSS,
        MetricKind.CALLS_PER_SECOND: Series.CALLS_PER_S,
        MetricKind.GENERATED_TOKENS_PER_SECOND: Series.GEN_TOKENS_PER_S,
        MetricKind.LATENCY_P50_MS: Series.LATENCY_P50,
    }
    return _last(series, direct[kind])


def compute_metrics(specs: Sequence[MetricSpec], series: SeriesMap) -> dict[str, float | None]:
    """name -> value for every metric of a benchmark."""
    return {m.name: compute_metric(m, series) for m in specs}
