"""Per-run scores from a learning curve: initial level, final level and normalised area under the curve.

A curve is the (step, value) series of one metric of one run as the store returns it (`None` values are
steps where the job logged NaN). Definitions over the valid points:
- initial: the first evaluation (step 0: the untrained level). Averaging the first quarter of the points, as
           this once did, mixed trained checkpoints into the baseline as soon as a run had 6 or more points;
- final:   the last evaluation (the trained model the question is about; held-out accuracy is a fixed-set
           evaluation, not a noisy training reward, so it needs no smoothing over earlier checkpoints);
- auc:     trapezoid area over steps divided by the step span = the curve's mean level, so runs with
           different step counts compare; a single point's auc is its value.
NaN steps are dropped; a run with NaN in its curve is reported as `diverged` so the report can say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CurveScore", "score_curve"]


@dataclass(frozen=True)
class CurveScore:
    initial: float
    final: float
    auc: float
    first_step: int
    last_step: int
    n_points: int
    diverged: bool  # some step logged NaN/inf

    def get(self, statistic: str) -> float:
        """The score named `statistic` ("final", "auc", "initial")."""
        if statistic not in ("final", "auc", "initial"):
            raise ValueError(f"unknown statistic {statistic!r}; use final, auc or initial")
        return getattr(self, statistic)


def score_curve(series: Sequence[tuple[int, float | None]]) -> CurveScore | None:
    """Scores of one run's curve, or None when it has no finite point."""
    pts = sorted(series)
    diverged = any(v is None or not np.isfinite(v) for _s, v in pts)
    good = [(s, float(v)) for s, v in pts if v is not None and np.isfinite(v)]
    if not good:
        return None
    steps = np.array([s for s, _ in good], dtype=float)  # (n,)
    vals = np.array([v for _, v in good])  # (n,)
    span = steps[-1] - steps[0]
    if span > 0:
        area = float(np.sum((vals[1:] + vals[:-1]) / 2 * np.diff(steps)))
        auc = area / span
    else:
        auc = float(vals.mean())
    return CurveScore(
        initial=float(vals[0]),
        final=float(vals[-1]),
        auc=auc,
        first_step=int(steps[0]),
        last_step=int(steps[-1]),
        n_points=len(vals),
        diverged=diverged,
    )
