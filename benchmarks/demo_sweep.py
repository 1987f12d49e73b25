"""Brute-force check of `a3r demo`: every arm of the demo question, several seeds, analysed like the campaign.

`a3r demo` searches for "the minimum batch size that still trains arithmetic (2 to 8)" after a calibration
stage. This is `benchmarks/goal_sweep.py` with the demo's goal, job settings (`DEMO_SETTINGS`) and budget
(`DEMO_BUDGET`: batch sizes 2 and 8, 8 steps) fixed, and its own output and run paths: every batch size of
the campaign's grid with every seed, answered at one look by `a3r.analysis.analyse` so the campaign's
conclusion can be checked against it. Run dirs are `<runs>/bs<x>-seed<seed>/`; finished ones are reused.

    .venv/bin/python benchmarks/demo_sweep.py --seeds 0 1 2 --out docs/benchmarks/demo_sweep

Compare with a finished campaign (its report JSON; completed runs are reused, nothing retrains):

    .venv/bin/python benchmarks/demo_sweep.py --campaign-report reports/demo-min-batch-size/report.json
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from a3r.leader.demo import DEMO_BUDGET, DEMO_CAMPAIGN, DEMO_GOAL, DEMO_SETTINGS  # noqa: E402
from benchmarks import goal_sweep  # noqa: E402

DEMO_PRESET = goal_sweep.Preset(
    goal=DEMO_GOAL,
    settings=DEMO_SETTINGS,
    budget=DEMO_BUDGET,
    out="docs/benchmarks/demo_sweep",
    runs="runs/demo_sweep",
    script="benchmarks/demo_sweep.py",
    report_hint=f"reports/{DEMO_CAMPAIGN}/report.json",
)


def main(argv: list[str] | None = None) -> None:
    goal_sweep.main(argv, preset=DEMO_PRESET)


if __name__ == "__main__":
    main()
