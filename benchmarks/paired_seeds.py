"""Does pairing arms on seeds pay on real runs? N seeds x 2 arms of the demo's default run, sd of the
per-seed differences against the unpaired sd of a difference, each with its interval.

A3R's confirmation compares arms paired on seeds when its exploration says the paired interval is the
narrower (`a3r.analysis.evidence.pairing_check`): runs of the same seed share the task order (`seed`)
and the sampling streams (`swarm.model.seed`, the same for every A3R run). Whether that sharing makes two
arms' runs of one seed correlate is an empirical question this script answers for the demo's question
(batch sizes 2 and 8 of `a3r demo`, jobs built by the leader's own code, as `benchmarks/demo_sweep.py`
builds them and in its run-dir layout, so an interrupted measurement resumes by running the same command).

For each seed it reads both runs' held-out gain (final - step-0 score: what the threshold tests use) and
final score (what best/compare use) and reports, for each:
- sd_paired: the sd of the per-seed differences, with a 95% chi-square interval (n - 1 df);
- sd_unpaired: sqrt(var_a + var_b), the sd of a difference of independent runs, with a 95% interval
  (Satterthwaite df);
- r: the correlation of the two arms over seeds, with a 95% Fisher-z interval;
- the paired and the Welch 95% interval of the mean difference.
Pairing pays when sd_paired < sd_unpaired, i.e. r > 0; with 8 seeds the intervals say how sure that is.

    .venv/bin/python benchmarks/paired_seeds.py --seeds 0 1 2 3 4 5 6 7 --out docs/benchmarks/paired_seeds

(`--set inference.batch_invariant=true` makes each run repeat bit for bit; without it batched decoding
moves log-probs by ~1e-6, which may break the pairing's sharing after a few steps.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as st

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.analysis import fmt  # noqa: E402
from a3r.analysis.stats import paired_interval, welch_interval  # noqa: E402
from a3r.leader.demo import DEMO_BUDGET, DEMO_GOAL, DEMO_SETTINGS  # noqa: E402
from a3r.leader.design import ResearchBudget  # noqa: E402
from a3r.leader.goals import parse_goal  # noqa: E402
from benchmarks.common import loadavg, machine_record  # noqa: E402
from benchmarks.goal_sweep import base_job, execute, observations, plan  # noqa: E402


def sd_interval(sd: float, df: float, level: float = 0.95) -> tuple[float, float]:
    """Chi-square interval of a standard deviation estimated with `df` degrees of freedom."""
    a = (1 - level) / 2
    return sd * math.sqrt(df / st.chi2.ppf(1 - a, df)), sd * math.sqrt(df / st.chi2.ppf(a, df))


def correlation_interval(r: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Fisher-z interval of a Pearson correlation from n pairs (needs n >= 4)."""
    z, half = math.atanh(max(min(r, 0.999999), -0.999999)), st.norm.ppf(1 - (1 - level) / 2) / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def pairing_summary(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Paired against unpaired for two arms' values, one per seed, in seed order."""
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    n = xa.size
    if n != xb.size or n < 4:
        raise ValueError(f"need the same n >= 4 seeds in both arms, got {xa.size} and {xb.size}")
    d = xa - xb
    sd_p = float(d.std(ddof=1))
    va, vb = float(xa.var(ddof=1)), float(xb.var(ddof=1))
    sd_u = math.sqrt(va + vb)
    df_u = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1)) if va + vb > 0 else float(n - 1)
    r = float(np.corrcoef(xa, xb)[0, 1]) if va > 0 and vb > 0 else float("nan")
    paired, welch = paired_interval(xa, xb), welch_interval(xa, xb)
    return {
        "n": n,
        "sd_paired": sd_p,
        "sd_paired_ci": sd_interval(sd_p, n - 1),
        "sd_unpaired": sd_u,
        "sd_unpaired_ci": sd_interval(sd_u, df_u),
        "r": r,
        "r_ci": correlation_interval(r, n) if math.isfinite(r) else None,
        "diff_paired": [paired.mean, paired.lo, paired.hi],
        "diff_welch": [welch.mean, welch.lo, welch.hi],
        "pairing_narrower": sd_p < sd_u,
    }


def _line(name: str, s: dict[str, Any]) -> str:
    lo, hi = s["sd_paired_ci"]
    ulo, uhi = s["sd_unpaired_ci"]
    r = "n/a" if s["r_ci"] is None else f"{fmt(s['r'])} [{fmt(s['r_ci'][0])}, {fmt(s['r_ci'][1])}]"
    return (
        f"{name}: sd paired {fmt(s['sd_paired'])} [{fmt(lo)}, {fmt(hi)}], unpaired {fmt(s['sd_unpaired'])} "
        f"[{fmt(ulo)}, {fmt(uhi)}], r {r}; difference paired {fmt(s['diff_paired'][0])} "
        f"[{fmt(s['diff_paired'][1])}, {fmt(s['diff_paired'][2])}], Welch [{fmt(s['diff_welch'][1])}, "
        f"{fmt(s['diff_welch'][2])}] (n={s['n']})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    p.add_argument("--steps", type=int, default=8, help="training steps per run (the demo's)")
    p.add_argument("--set", dest="settings", action="append", default=[], help="KEY=VALUE on the job")
    p.add_argument("--runs", type=Path, default=Path("runs/paired_seeds"))
    p.add_argument("--out", type=Path, default=None, help="write <out>.json with every number")
    args = p.parse_args(argv)
    goal = parse_goal(DEMO_GOAL)
    base = base_job((*DEMO_SETTINGS, *args.settings))
    runs = plan(goal, base, args.steps, sorted(args.seeds), args.runs, ResearchBudget(**DEMO_BUDGET))
    xs = sorted({r.x for r in runs})
    if len(xs) != 2:
        raise SystemExit(f"the demo question has {len(xs)} arms here; this script compares exactly 2")
    load_start = loadavg()
    t0 = time.perf_counter()
    walls = [execute(r) for r in runs]
    obs = {(o.x, o.seed): o.score() for o in observations(runs, goal.metric)}
    seeds = sorted(args.seeds)
    result: dict[str, Any] = {"arms": xs, "seeds": seeds, "steps": args.steps, "settings": args.settings}
    for name, get in (("gain", lambda s: s.final - s.initial), ("final", lambda s: s.final)):
        a = [get(obs[(xs[1], s)]) for s in seeds]
        b = [get(obs[(xs[0], s)]) for s in seeds]
        result[name] = {"values": {str(xs[1]): a, str(xs[0]): b}, **pairing_summary(a, b)}
        print(_line(f"{name} ({xs[1]} - {xs[0]})", result[name]))
    result["machine"] = {
        **machine_record(),
        "load_start": load_start,
        "load_end": loadavg(),
        "wall_s": time.perf_counter() - t0,
        "run_wall_s": walls,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
