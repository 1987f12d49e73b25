"""Import time of the processes that never compute (swarm client, job launch, CLIs), an old tree against this one.

Issue 31: the swarm client, job launch and the CLIs imported torch only to learn the built-in losses' and
advantages' names and defaults; the suite starts hundreds of these processes and every A3R run starts some.
Each repeat starts a fresh interpreter per entry and tree (one thread, as an A3R slot sets it) and times the
entry's imports inside it (interpreter start excluded); repeats rotate the trees' order. The headline is
new/old per entry over repeats (median, min, max), with the load average recorded; on a busy machine only the
proportions mean anything.

    PYTHONPATH=$PWD python benchmarks/client_imports.py --old e5af39b --repeats 5 --out /tmp/client_imports
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(REPO))

from benchmarks.common import (  # noqa: E402
    fmt_spread,
    loadavg,
    machine_record,
    rotated,
    spread,
    worktree_at,
    write_report,
)

ENTRIES = {
    "engine.jobs": "import engine.jobs",
    "engine.launch": "import engine.launch",
    "engine.cli": "import engine.cli",
    "a3r worker": "import a3r.cli, a3r.worker.runner, a3r.worker.sinks, a3r.worker.spec",
    "vibe.cli": "import vibe.cli",
}


def import_seconds(tree: Path, code: str) -> float:
    """Wall seconds `code` takes in a fresh 1-thread interpreter importing from `tree`."""
    timed = f"import time; t = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # cwd=tree too: `-c` puts the working directory first on sys.path.
    out = subprocess.run([sys.executable, "-c", timed], env=env, cwd=tree, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure(old_tree: Path, new_tree: Path, repeats: int) -> dict[str, Any]:
    """Seconds per entry, tree and repeat, and new/old per entry over the repeats."""
    secs: dict[str, dict[str, list[float]]] = {e: {"old": [], "new": []} for e in ENTRIES}
    loads = []
    for k in range(repeats):
        loads.append(loadavg())
        for label, tree in rotated([("old", old_tree), ("new", new_tree)], k):
            for entry, code in ENTRIES.items():
                secs[entry][label].append(import_seconds(tree, code))
    return {
        "seconds": secs,
        "median_s": {e: {t: statistics.median(v) for t, v in s.items()} for e, s in secs.items()},
        "new_over_old": {e: spread([n / o for n, o in zip(s["new"], s["old"], strict=True)]) for e, s in secs.items()},
        "loadavg_per_repeat": loads,
    }


def page(result: dict[str, Any]) -> str:
    """One line per entry: median seconds of each tree and new/old over the repeats."""
    lines = [f"Import seconds, {result['old']} (old) against this tree (new), load {result['machine']['loadavg_before']}:"]
    for entry, ratio in result["new_over_old"].items():
        med = result["median_s"][entry]
        lines.append(f"- {entry}: old {med['old']:.3f}s, new {med['new']:.3f}s, new/old {fmt_spread(ratio)}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="main", help="baseline revision (a detached worktree is made of it)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="writes OUT.json (every measurement) and OUT.md")
    args = ap.parse_args(argv)
    load_before = loadavg()
    with worktree_at(args.old) as old_tree:
        result = measure(old_tree, REPO, args.repeats)
    result.update(old=args.old, machine=machine_record(load_before))
    print(write_report(args.out, result, page) if args.out else page(result))
    return result


if __name__ == "__main__":
    main()
