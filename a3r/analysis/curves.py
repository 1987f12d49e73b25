"""Per-run scores from a learning curve: initial level, final level and normalised area under the curve.

A curve is the (step, value) series of one metric of one run as the store returns it (`None` values are
steps where the job logged NaN). Definitions, with k = max(1, round(tail_fraction * n)) valid points:
- initial: mean of the first k values (the untrained level; the policy barely moved yet);
- final:   mean of the last k values (training reward is noisy step to step; one point is not a level);
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


def score_curve(
    series: Sequence[tuple[int, float | None]], *, tail_fraction: float = 0.25
) -> CurveScore | None:
    """Scores of one run's curve, or None when it has no finite point."""
    if not 0 < tail_fraction <= 1:
        raise ValueError(f"tail_fraction must be in (0, 1], got {tail_fraction}")
    pts = sorted(series)
    diverged = any(v is None or not np.isfinite(v) for _s, v in pts)
    good = [(s, float(v)) for s, v in pts if v is not None and np.isfinite(v)]
    if not good:
        return None
    steps = np.array([s for s, _ in good], dtype=float)  # (n,)
    vals = np.array([v for _, v in good])  # (n,)
    k = max(1, round(tail_fraction * len(vals)))
    span = steps[-1] - steps[0]
    if span > 0:
        area = float(np.sum((vals[1:] + vals[:-1]) / 2 * np.diff(steps)))
        auc = area / span
    else:
        auc = float(vals.mean())
    return CurveScore(
        initial=float(vals[:k].mean()),
        final=float(vals[-k:].mean()),
        auc=auc,
        first_step=int(steps[0]),
        last_step=int(steps[-1]),
        n_points=len(vals),
        diverged=diverged,
    )
