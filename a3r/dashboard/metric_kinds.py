"""Which kind of quantity a logged metric is, by its name, so pages can show the primary metric first and
the rest grouped: evaluation, then training, then timing, then system resources.

Names are all the store records about a metric, so this is a naming convention, not a guarantee: a metric
whose name matches no rule counts as training (what an engine logs most).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

__all__ = ["MetricKind", "metric_kind", "ordered_metrics"]


class MetricKind(str, Enum):
    """Kinds in the order pages show them."""

    EVALUATION = "evaluation"
    TRAINING = "training"
    TIMING = "timing"
    SYSTEM = "system"


_ORDER = {kind: i for i, kind in enumerate(MetricKind)}
_EVALUATION = ("eval", "heldout", "held_out", "accuracy", "test_")
_TIMING = ("time", "latency", "_per_s", "per_second", "throughput", "wall", "duration")
_TIMING_SUFFIX = ("_s", "_ms", "_sec", "_seconds")
_SYSTEM = ("memory", "mem_", "_mb", "_gb", "gpu_", "cpu_", "rss")


def metric_kind(name: str) -> MetricKind:
    """The kind of metric `name` (case-insensitive; see the module docstring)."""
    low = name.lower()
    if any(w in low for w in _SYSTEM):
        return MetricKind.SYSTEM
    if any(w in low for w in _TIMING) or low.endswith(_TIMING_SUFFIX):
        return MetricKind.TIMING
    if any(low.startswith(w) or f"_{w}" in low or f"/{w}" in low for w in _EVALUATION):
        return MetricKind.EVALUATION
    return MetricKind.TRAINING


def ordered_metrics(names: Iterable[str], primary: str | None) -> list[dict[str, str]]:
    """[{name, kind}] for `names`: the primary metric first, then by kind, then by name."""

    def key(name: str) -> tuple[int, int, str]:
        return (0 if name == primary else 1, _ORDER[metric_kind(name)], name)

    return [{"name": n, "kind": metric_kind(n).value} for n in sorted(set(names), key=key)]
