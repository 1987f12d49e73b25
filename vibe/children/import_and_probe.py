"""Sandboxed child of `vibe check`: import the client's modules, check the contract's functions, and run
the reward probes. Writes {"flags": [...], "stats": {...}} to --result. Run by vibe.sandbox only.

It imports neither torch nor the engine (the parent passes the probe limits), so it starts fast."""

from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path

from vibe.flags import Report, Severity, Stage
from vibe.jsonl import read_jsonl
from vibe.layout import CLIENT_FILE, REQUIRED_FUNCTIONS, REWARD_FILE, TRAIN_FILE
from vibe.loader import client_roles, contract_function, load_module
from vibe.reward_probes import ProbeLimits, probe_rewards

PROBE_TASKS = 8


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--limits", required=True, help="ProbeLimits as JSON")
    p.add_argument("--result", required=True)
    args = p.parse_args()
    root = Path(args.root)
    report = Report(client=str(root))
    fns = {}
    for filename in REQUIRED_FUNCTIONS:
        try:
            module = load_module(root, filename)
            fns[filename] = contract_function(module, filename)
            if filename == CLIENT_FILE:
                report.stats["roles"] = client_roles(module)
        except Exception as e:  # noqa: BLE001 - any import-time failure of client code is the finding
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
            report.add(Stage.STATIC, "import_failed", Severity.ERROR,
                       f"{filename} does not import or lacks its contract function: {type(e).__name__}: {e}",
                       file=filename, traceback=tb)
    if REWARD_FILE in fns:
        limits = ProbeLimits.model_validate_json(args.limits)
        tasks, _ = read_jsonl(root / TRAIN_FILE)
        probe_rewards(fns[REWARD_FILE], [t for t in tasks if isinstance(t, dict)][:PROBE_TASKS], limits, report)
    Path(args.result).write_text(json.dumps({"flags": [f.model_dump(mode="json") for f in report.flags],
                                             "stats": report.stats}))


if __name__ == "__main__":
    main()
