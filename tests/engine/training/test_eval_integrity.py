"""An evaluation is recorded only whole (issue 26, defect 4): `swarm train` whose server is SIGKILLed in
the middle of the "before" evaluation restarts it and measures that evaluation again, in full, logging
one row that counts its items; rerunning the finished run dir changes nothing, and neither does rerunning
it as a SIGKILL between the final evaluation row and summary.json leaves it. The reruns call the same
`swarm train` command line in this process (`swarm_train_here`; the second still runs its server as a
subprocess)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests_support import BackgroundTrain, swarm_train_here, tiny_train_job

from engine.training.audit import audit_run_dir

EVAL_SIZE = 48


def _eval_rows(metrics: Path) -> list[dict]:
    if not metrics.exists():
        return []
    return [r for r in map(json.loads, metrics.read_text().splitlines()) if "eval_accuracy" in r]


@pytest.mark.slow
@pytest.mark.timeout(900)  # real servers and training: 168-302 s in a suite beside a 2-slot sweep on 2 cores; 300 s cut one
def test_an_evaluation_cut_short_by_a_killed_server_is_measured_again_in_full(tmp_path, capsys):
    # long random replies: the evaluation lasts seconds, long enough to be cut
    job = tiny_train_job(steps=1, eval_size=EVAL_SIZE, max_tokens=96)
    with BackgroundTrain(tmp_path, job) as train:
        metrics = train.run_dir / "metrics.jsonl"
        train.wait_until(lambda: "server ROLLING at step 0" in train.stderr(), "the server rolled")
        time.sleep(1.0)  # the "before" evaluation's episodes are under way
        assert _eval_rows(metrics) == [], "the evaluation finished before the kill: lengthen it"
        train.kill_server()
        err = train.wait()
    assert train.proc.returncode == 0, err[-3000:]
    assert "restarting it from the last checkpoint" in err
    rows = _eval_rows(metrics)
    # One "before" row (step 0), measured on every item after the restart, and one "after" row.
    assert [(r["step"], r["eval_items"]) for r in rows] == [(0, EVAL_SIZE), (1, EVAL_SIZE)], rows
    summary = json.loads((train.run_dir / "summary.json").read_text())
    assert summary["accuracy_before"] == rows[0]["eval_accuracy"]
    report = audit_run_dir(train.run_dir, eval_items=EVAL_SIZE)
    assert report.ok and report.checked["evaluations"] == 2, report.as_dict()

    # A finished run dir run again: nothing evaluated again, no second final row.
    before = metrics.read_text()
    assert "already finished" in swarm_train_here(train.cmd, capsys) and metrics.read_text() == before

    # The state a SIGKILL leaves between the final `eval_accuracy` row and summary.json (the window is too
    # short to hit reliably): the finished run dir less its summary. The rerun resumes the final
    # checkpoint, reuses the recorded final accuracy, and logs no second final row.
    (train.run_dir / "summary.json").unlink()
    assert "was recorded before an interruption" in swarm_train_here(train.cmd, capsys)
    assert metrics.read_text() == before
    rerun = json.loads((train.run_dir / "summary.json").read_text())
    assert rerun["accuracy_after"] == summary["accuracy_after"] == rows[1]["eval_accuracy"]
    assert audit_run_dir(train.run_dir, eval_items=EVAL_SIZE).ok
