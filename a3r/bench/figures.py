"""Figures of a benchmark report, as PNG bytes (matplotlib, Agg backend).

- `heatmap`: rows are (benchmark, metric), columns are commits oldest first (figure 9 of the AgentJet
  paper); a cell's colour is the change of the commit's mean against the first measured commit, signed so
  that green is better and red worse whatever the metric's direction, clipped at +-50%; the mean is
  written in the cell. Blank: not measured.
- `history`: one panel per metric of a benchmark: each seed's value per commit (dots), the commit means
  (line), and the detected change points (dashed; red when the step is a regression).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: reports render on headless hosts and in tests
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["heatmap", "history"]

CLIP = 0.5


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def heatmap(rows: Sequence[str], commits: Sequence[str], means: np.ndarray, better: np.ndarray) -> bytes:
    """`means` (R, C) commit means (NaN: not measured); `better` (R, C) signed relative change vs the
    first commit, positive = better."""
    R, C = means.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * C + 3), max(2.0, 0.45 * R + 1)))
    shown = np.ma.masked_invalid(np.clip(better, -CLIP, CLIP))
    im = ax.imshow(shown, cmap="RdYlGn", vmin=-CLIP, vmax=CLIP, aspect="auto")
    for r in range(R):
        for c in range(C):
            if np.isfinite(means[r, c]):
                ax.text(c, r, _fmt(means[r, c]), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(C), list(commits), rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(R), list(rows), fontsize=7)
    fig.colorbar(im, ax=ax, label="change vs first commit (green better)", shrink=0.8)
    ax.set_title("benchmark x commit")
    return _png(fig)


def history(
    benchmark: str,
    panels: Sequence[tuple[str, str, list[list[float]], list[tuple[int, bool]]]],
    commits: Sequence[str],
) -> bytes:
    """`panels`: (metric, unit, values per commit, [(change index, is regression)])."""
    n = len(panels)
    fig, axes = plt.subplots(n, 1, figsize=(max(5.0, 0.6 * len(commits) + 3), 2.2 * n), squeeze=False)
    x = np.arange(len(commits))
    for ax, (metric, unit, groups, changes) in zip(axes[:, 0], panels, strict=True):
        for i, g in enumerate(groups):
            ax.plot([i] * len(g), g, "o", color="tab:blue", alpha=0.5, ms=4)
        means = [float(np.mean(g)) if g else np.nan for g in groups]
        ax.plot(x, means, "-", color="tab:blue")
        for idx, bad in changes:
            ax.axvline(idx - 0.5, ls="--", color="tab:red" if bad else "tab:green")
        ax.set_ylabel(f"{metric}\n({unit})", fontsize=8)
        ax.set_xticks(x, list(commits), rotation=45, ha="right", fontsize=7)
    axes[0, 0].set_title(f"{benchmark}: history (dashed: change points; red = regression)")
    fig.tight_layout()
    return _png(fig)
