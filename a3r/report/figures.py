"""matplotlib figures for campaign reports, returned as PNG bytes (Agg backend: no display needed).

- `learning_curves`: the metric per step for each arm of a stage; thin lines are seeds, the thick line
  their mean over the steps all seeds logged; one panel per level of the secondary variable.
- `score_vs_variable`: each arm's score against the studied variable with its t interval as an
  error bar (none for single-seed arms), one series per secondary level, the criterion as a dashed line
  for threshold questions. Log x axis for variables searched on a log scale.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: reports render on headless hosts and in tests
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from a3r.analysis import Evidence, RunObs, fmt  # noqa: E402
from a3r.leader.goals import Goal  # noqa: E402

__all__ = ["learning_curves", "score_vs_variable"]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _level_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def learning_curves(obs: Sequence[RunObs], goal: Goal, title: str) -> bytes:
    """Per-arm learning curves of the given runs (runs without points are skipped)."""
    by_level: dict[Any, dict[str, list[RunObs]]] = defaultdict(lambda: defaultdict(list))
    for o in obs:
        if any(v is not None for _s, v in o.series):
            by_level[o.level][o.label].append(o)
    levels = sorted(by_level, key=_level_key) or [None]
    fig, axes = plt.subplots(1, len(levels), figsize=(5.2 * len(levels), 3.6), squeeze=False, sharey=True)
    for ax, lvl in zip(axes[0], levels, strict=True):
        arms = by_level.get(lvl, {})
        cmap = plt.get_cmap("viridis", max(2, len(arms)))
        for i, (label, runs) in enumerate(sorted(arms.items(), key=lambda kv: _level_key(kv[1][0].x))):
            color = cmap(i)
            curves = []
            for o in runs:
                pts = [(s, v) for s, v in o.series if v is not None]
                ax.plot([s for s, _ in pts], [v for _, v in pts], color=color, alpha=0.25, linewidth=0.8)
                curves.append(dict(pts))
            common = sorted(set.intersection(*(set(c) for c in curves)))
            if common:
                ax.plot(
                    common,
                    [np.mean([c[s] for c in curves]) for s in common],
                    color=color,
                    linewidth=2,
                    label=f"{label} (n={len(runs)})",
                )
        sub = f"{goal.secondary.name} = {fmt(lvl)}" if goal.secondary is not None and lvl is not None else ""
        ax.set_title(sub or title, fontsize=10)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        if arms:
            ax.legend(fontsize=7, loc="best")
    axes[0][0].set_ylabel(goal.metric)
    if goal.secondary is not None:
        fig.suptitle(title, fontsize=11)
    return _png(fig)


def score_vs_variable(ev: Evidence, goal: Goal) -> bytes:
    """Arm scores with their t intervals against the studied variable, the untrained level and the
    criterion (a relative criterion is a gain, drawn on the score scale above the untrained level)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    knob = goal.factor.knob
    categorical = knob.kind == "choice"
    cats = sorted({a.x for le in ev.levels for a in le.arms}, key=str) if categorical else []
    markers = "osD^v"
    for i, le in enumerate(ev.levels):
        arms = sorted(le.arms, key=lambda a: _level_key(a.x))
        if not arms:
            continue
        xs = np.array(
            [cats.index(a.x) + 0.08 * i for a in arms] if categorical else [a.x for a in arms], dtype=float
        )
        ys = np.array([a.interval.mean for a in arms])
        lo = np.array([a.interval.mean - a.interval.lo if a.interval.defined else 0.0 for a in arms])
        hi = np.array([a.interval.hi - a.interval.mean if a.interval.defined else 0.0 for a in arms])
        name = f"{goal.secondary.name} = {fmt(le.level)}" if goal.secondary is not None else goal.statistic
        line = ax.errorbar(
            xs,
            ys,
            yerr=[lo, hi],
            marker=markers[i % len(markers)],
            capsize=4,
            linestyle="none" if categorical else "-",
            label=name,
        )
        if le.threshold is not None:
            th = le.threshold
            level = th.criterion.mean if goal.criterion.kind == "absolute" else th.floor + th.criterion.mean
            ax.axhline(
                level,
                color=line[0].get_color(),
                linestyle="--",
                linewidth=1,
                label=f"criterion {fmt(level)}" + (f" ({fmt(le.level)})" if le.level is not None else ""),
            )
    if ev.untrained is not None:
        if ev.untrained.defined:
            ax.axhspan(ev.untrained.lo, ev.untrained.hi, color="grey", alpha=0.15)
        ax.axhline(ev.untrained.mean, color="grey", linewidth=1, label=f"untrained {fmt(ev.untrained.mean)}")
    if categorical:
        ax.set_xticks(range(len(cats)), [str(c) for c in cats])
    elif knob.scale == "log":
        ax.set_xscale("log", base=2 if knob.kind == "int" else 10)
        ticks = sorted({a.x for le in ev.levels for a in le.arms})
        if knob.kind == "int":
            ax.set_xticks(ticks, [fmt(t) for t in ticks])
    ax.set_xlabel(goal.factor.name)
    ax.set_ylabel(f"{goal.statistic} {goal.metric} (mean, {100 * ev.question.level:.4g}% t CI)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)
